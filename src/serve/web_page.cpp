#include "serve/web_page.h"

namespace tern::serve {

// Markdown support is deliberately small: fenced code, inline code, bold, italics, paragraphs; everything is
// HTML-escaped first. <think>...</think> is shown as a collapsed "thinking" block.
static const char* kPage = R"TERNHTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>tern chat</title>
<style>
body{font-family:system-ui,sans-serif;margin:0;display:flex;flex-direction:column;height:100vh;background:#fafafa;color:#222}
header{padding:.5em 1em;background:#234;color:#fff;display:flex;gap:1em;align-items:center}
header h1{font-size:1.1em;margin:0;flex:1}
#settings{display:none;padding:.5em 1em;background:#eef;border-bottom:1px solid #ccd}
#settings label{display:inline-block;margin:.2em 1em .2em 0}
#settings textarea{width:100%;height:3em}
#log{flex:1;overflow-y:auto;padding:1em}
.msg{max-width:50em;margin:.5em auto;padding:.6em .9em;border-radius:8px;white-space:normal;line-height:1.4}
.user{background:#dde8ff}.assistant{background:#fff;border:1px solid #ddd}.error{background:#fdd}
.msg pre{background:#f3f3f3;padding:.5em;overflow-x:auto}
details.think{color:#666;font-size:.9em;margin-bottom:.4em}
form{display:flex;gap:.5em;padding:.6em 1em;border-top:1px solid #ddd;background:#fff}
#input{flex:1;height:3em;font:inherit}
button{font:inherit;padding:.3em 1em}
#stats{font-size:.8em;color:#bbc}
</style></head><body>
<header><h1>tern chat <span id="model"></span></h1><span id="stats"></span>
<button id="reset" type="button">New chat</button><button id="toggle" type="button">Settings</button></header>
<div id="settings">
<label>Temperature <input id="temperature" type="number" step="0.1" min="0" max="2" value="0.7"></label>
<label>Max tokens <input id="max_tokens" type="number" min="1" value="256"></label>
<label>API key <input id="api_key" type="password"></label>
<label><input id="thinking" type="checkbox" checked> Let the model think (if its template can)</label>
<div>System prompt<textarea id="system"></textarea></div>
</div>
<div id="log"></div>
<form id="form"><textarea id="input" placeholder="Type a message (Enter sends, Shift+Enter for a new line)"></textarea>
<button id="send" type="submit">Send</button><button id="stop" type="button" disabled>Stop</button></form>
<script>
"use strict";
const $ = id => document.getElementById(id);
let history = [], controller = null;
function esc(s){return s.replace(/&/g,"&amp;").replace(/</g,"&lt;").replace(/>/g,"&gt;");}
function md(s){
  const parts = s.split("```");
  return parts.map((p,i)=>{
    if(i%2){const nl=p.indexOf("\n");return "<pre><code>"+esc(nl>=0?p.slice(nl+1):p)+"</code></pre>";}
    return esc(p).replace(/`([^`]+)`/g,"<code>$1</code>").replace(/\*\*([^*]+)\*\*/g,"<b>$1</b>")
      .replace(/\*([^*\n]+)\*/g,"<i>$1</i>").replace(/\n/g,"<br>");
  }).join("");
}
// Reasoning (reasoning_content) is shown in a "thinking" block, open until the answer starts, then collapsed.
function render(reasoning, answer){
  let h = "";
  if(reasoning.trim()) h += "<details class=\"think\""+(answer?"":" open")+"><summary>thinking</summary>"+
    "<div class=\"reasoning\">"+md(reasoning)+"</div></details>";
  return h + "<div class=\"answer\">"+md(answer)+"</div>";
}
function add(role, text){
  const d = document.createElement("div"); d.className = "msg "+role; d.dataset.role = role; d.innerHTML = role==="user"?md(text):render("", text);
  $("log").appendChild(d); $("log").scrollTop = $("log").scrollHeight; return d;
}
async function send(text){
  history.push({role:"user",content:text}); add("user", text);
  const out = add("assistant", ""); let answer = "", reasoning = "";
  const msgs = ($("system").value.trim()?[{role:"system",content:$("system").value}]:[]).concat(history);
  const headers = {"Content-Type":"application/json"};
  if($("api_key").value) headers["Authorization"] = "Bearer "+$("api_key").value;
  controller = new AbortController(); $("stop").disabled = false; $("send").disabled = true;
  const t0 = performance.now(); let n = 0;
  // The answer is redrawn at most every 50 ms, not per token: a redraw renders the whole text, so drawing per token
  // costs the square of the answer's length and a long fast answer froze the page (its Stop button included).
  let pending = 0;
  const show = () => {out.innerHTML = render(reasoning, answer); $("log").scrollTop = $("log").scrollHeight;};
  const draw = () => {if(!pending) pending = setTimeout(() => {pending = 0; show();}, 50);};
  try{
    const r = await fetch("/v1/chat/completions",{method:"POST",headers,signal:controller.signal,
      body:JSON.stringify({messages:msgs,stream:true,temperature:+$("temperature").value,
        max_tokens:+$("max_tokens").value,stream_options:{include_usage:true},reasoning_format:"auto",
        chat_template_kwargs:$("thinking").checked?{}:{enable_thinking:false}})});
    if(!r.ok){const e = await r.json().catch(()=>({error:{message:r.statusText}}));throw new Error(e.error.message);}
    const reader = r.body.getReader(), dec = new TextDecoder(); let buf = "";
    for(;;){
      const {value, done} = await reader.read(); if(done) break;
      buf += dec.decode(value,{stream:true}); let i;
      while((i = buf.indexOf("\n\n"))>=0){
        const ev = buf.slice(0,i); buf = buf.slice(i+2);
        if(!ev.startsWith("data: ")) continue;
        const data = ev.slice(6); if(data==="[DONE]") continue;
        const j = JSON.parse(data);
        if(j.error) throw new Error(j.error.message);
        if(j.usage) n = j.usage.completion_tokens;
        const d = j.choices && j.choices.length ? j.choices[0].delta : {};
        if(d.reasoning_content || d.content){reasoning += d.reasoning_content||""; answer += d.content||""; draw();}
      }
    }
    clearTimeout(pending); pending = 0; show();
    $("stats").textContent = n+" tokens, "+(n/((performance.now()-t0)/1000)).toFixed(1)+" tok/s";
  }catch(e){
    clearTimeout(pending); pending = 0;
    if(e.name==="AbortError"){out.innerHTML = render(reasoning, answer)+" <i>[stopped]</i>";}
    else{out.className = "msg error"; out.textContent = "error: "+e.message;}
  }
  history.push({role:"assistant",content:answer});
  controller = null; $("stop").disabled = true; $("send").disabled = false; out.dataset.done = "1";
}
$("form").onsubmit = e => {e.preventDefault(); const t = $("input").value.trim(); if(!t||controller) return; $("input").value=""; send(t);};
$("input").onkeydown = e => {if(e.key==="Enter"&&!e.shiftKey){e.preventDefault();$("form").requestSubmit();}};
$("stop").onclick = () => {if(controller) controller.abort();};
$("reset").onclick = () => {if(controller) controller.abort(); history = []; $("log").innerHTML = "";};
$("toggle").onclick = () => {const s=$("settings").style; s.display = s.display==="block"?"none":"block";};
fetch("/v1/models").then(r=>r.json()).then(j=>{$("model").textContent = "· "+j.data[0].id;}).catch(()=>{});
// /?temperature=T&max_tokens=N&system=S preset the settings; q=TEXT sends TEXT as the first message (links that
// start a chat; the browser test uses them).
const params = new URLSearchParams(location.search);
for(const k of ["temperature","max_tokens","system"]) if(params.has(k)) $(k).value = params.get(k);
if(params.get("q")) send(params.get("q"));
</script></body></html>
)TERNHTML";

const std::string& web_page_html() {
  static const std::string page(kPage);
  return page;
}

}  // namespace tern::serve

#!/usr/bin/env python3
"""Golden renders for tern's Jinja interpreter, produced by transformers' own chat-template machinery.

Writes into tests/fixtures/templates/:
  goldens.json  - every (template, case) pair from cases.json rendered with
                  transformers.utils.chat_template_utils.render_jinja_template (what apply_chat_template(tokenize=False)
                  calls), or the error it raised.
  features.json - small templates exercising single Jinja features, rendered in the same compiled environment
                  (_compile_jinja_template: sandbox, trim_blocks, lstrip_blocks, loopcontrols, HF tojson, ...).
Run from the repository root: python3 tools/gen_template_goldens.py   (needs jinja2>=3.1.6 and transformers)
"""
import json
import pathlib

import jinja2
import transformers
from transformers.utils.chat_template_utils import _compile_jinja_template, render_jinja_template

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "templates"

# name -> (template file). Provenance in tests/fixtures/templates/README.md.
TEMPLATES = ["qwen3.5-0.8b.jinja", "qwen3.6-patched.jinja", "glm-4.6.jinja", "glm-4.7.jinja", "glm-5.3.jinja"]


def render_case(tpl, case):
    kwargs = dict(case.get("extra", {}))
    try:
        out, _ = render_jinja_template(
            conversations=[case["messages"]],
            tools=case.get("tools"),
            chat_template=tpl,
            add_generation_prompt=case.get("add_generation_prompt", False),
            **kwargs,
        )
        return {"expected": out[0]}
    except Exception as e:  # the template (or the environment) refused the input: tern must refuse it too
        return {"error": f"{type(e).__name__}: {e}"}


# Feature templates: (name, template, context). Contexts are JSON so the C++ side sees the same values.
FEATURES = [
    # whitespace control, trim_blocks, lstrip_blocks
    ("ws_trim_blocks", "{% if true %}\nA\n{% endif %}\nB", {}),
    ("ws_lstrip_blocks", "x\n    {% if true %}\n    y\n    {% endif %}\nz", {}),
    ("ws_lstrip_not_var", "a\n    {{ 1 }}\n  b", {}),
    ("ws_lstrip_midline", "a  {% if true %}b{% endif %}  c", {}),
    ("ws_minus_both", "a   \n {%- if true -%} \n  b  \n {%- endif -%}\n  c", {}),
    ("ws_var_minus", "a \n {{- 'x' -}} \n b", {}),
    ("ws_plus", "a\n    {%+ if true %}b{% endif +%}\nc", {}),
    ("ws_comment", "a\n  {# note #}\nb {#- x -#}  c", {}),
    ("ws_trailing_newline", "line\n", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("ws_raw", "{% raw %}{{ not }}{% if %}{% endraw %}!", {}),
    ("ws_unicode_space_minus", "a\u3000\u00a0 {{- 'b' -}} \u2003c", {}),
    # loops
    ("loop_vars", "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}"
                  "/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}|{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("loop_prev_next", "{% for x in xs %}[{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}]{% endfor %}",
     {"xs": [1, 2, 3]}),
    ("loop_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}"
                            "{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_else", "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", {}),
    ("loop_filter", "{% for x in xs if x > 1 %}{{ x }}:{{ loop.index }}{{ ',' if not loop.last }}{% endfor %}",
     {"xs": [1, 2, 3, 0, 4]}),
    ("loop_unpack_items", "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% for k, v in d.items() %}"
                          "{{ k }}{% endfor %}", {"d": {"b": 1, "a": [1, 2], "c": None}}),
    ("loop_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "y": 2}}),
    ("loop_string", "{% for c in 'héllo' %}{{ c }}.{% endfor %}", {}),
    ("loop_scope", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }};{% endfor %}{{ x }}",
     {}),
    ("loop_nested", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}"
                    "{{ loop.index }} {% endfor %}", {}),
    ("loop_cycle", "{% for i in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    # macros, namespace, set
    ("macro_defaults", "{% macro f(a, b=a + 1, c='z') %}{{ a }}-{{ b }}-{{ c }}-{{ g }}{% endmacro %}"
                       "{% set g = 3 %}{{ f(1) }} {{ f(1, c='q') }} {{ f(a=5) }}", {}),
    ("macro_filter_pipe", "{% macro m(x) %}  {{ x }}  {% endmacro %}[{{ m('v')|trim }}][{{ m('w') }}]", {}),
    ("macro_recursion_and_later_def", "{% macro a(n) %}{% if n > 0 %}{{ n }}{{ a(n - 1) }}{% endif %}{{ b() }}"
                                      "{% endmacro %}{% macro b() %}!{% endmacro %}{{ a(3) }}", {}),
    ("namespace_set", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
                      "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns.missing is defined }}", {}),
    ("set_if_leaks", "{% if true %}{% set z = 5 %}{% endif %}{{ z }}", {}),
    ("set_tuple", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}", {}),
    ("set_block", "{% set blk %}  x{{ 1 }}  {% endset %}[{{ blk }}]{% set t | upper %}abc{% endset %}{{ t }}", {}),
    ("with_block", "{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}", {}),
    # expressions and operators
    ("arith", "{{ 1 + 2 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} "
              "{{ 1 + 2.5 }} {{ 10 - 0.1 }} {{ 3 * 'ab' }} {{ [1] + [2] }} {{ true + 1 }}", {}),
    ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ u ~ [1, 'x'] ~ {'k': none} }}", {}),
    ("compare_chain", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ [1, 2] == [1, 2] }} "
                      "{{ 'x' != 'y' }} {{ 2 >= 2 }} {{ none == none }} {{ u == u }}", {}),
    ("in_operator", "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} "
                    "{{ 'a' in u }}", {}),
    ("and_or_values", "{{ 0 or 'x' }} {{ '' and 1 }} {{ [] or {} }} {{ none or none }}|{{ 1 and 2 }} "
                      "{{ u is defined and u.x }}", {}),
    ("cond_expr", "{{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}[{{ 'y' if 0 }}]{{ 'a' if 0 else 'b' if 1 else 'c' }}",
     {}),
    ("not_precedence", "{{ not 1 == 2 }} {{ not true and false }} {{ not (true and false) }} {{ -2 ** 2 }}", {}),
    ("literals", "{{ 'a\\tb\\n' }}|{{ \"q'\" }}|{{ 'x' 'y' }}|{{ 1_000 }}|{{ 1.5e3 }}|{{ 0.1 + 0.2 }}|"
                 "{{ True }}{{ None }}{{ false }}|{{ (1, 2) }}|{{ (1,) }}|{{ () }}|{{ '\\u00e9\\x41' }}", {}),
    ("output_repr", "{{ xs }} {{ d }} {{ f }} {{ big }} {{ small }} {{ neg }} {{ s }}",
     {"xs": [1, "a'b", None, True, 2.0, "é\n"], "d": {"k": [1, {"n": False}]}, "f": 1e16, "big": 123456789012,
      "small": 1e-05, "neg": -0.5, "s": "it's \"q\""}),
    # subscripts and slicing
    ("subscript", "{{ xs[0] }}{{ xs[-1] }}{{ d['k'] }}{{ d.k }}{{ xs.1 }}[{{ xs[10] }}]{{ s[1] }}{{ m.content.0.type }}",
     {"xs": [1, 2, 3], "d": {"k": "v"}, "s": "héllo", "m": {"content": [{"type": "text"}]}}),
    ("slicing", "{{ xs[::-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::2] }} {{ xs[5:] }} {{ s[:3] }} {{ s[::-1] }} "
                "{{ s[-2:] }} {{ xs[-10:2] }} {{ xs[3:0:-1] }}", {"xs": [0, 1, 2, 3, 4], "s": "añb😀c"}),
    # undefined
    ("undefined_semantics", "[{{ u }}][{{ u|length }}][{{ u|trim }}][{{ u is iterable }}][{{ u is sequence }}]"
                            "[{{ u|default('d') }}][{{ none|default('d') }}][{{ ''|default('e', true) }}]"
                            "[{% for x in u %}{{ x }}{% endfor %}][{{ d.missing is undefined }}][{{ not u }}]",
     {"d": {}}),
    ("undefined_attr_error", "{{ u.x }}", {}),
    ("undefined_add_error", "{{ u + 1 }}", {}),
    ("undefined_call_error", "{{ u() }}", {}),
    # filters
    ("filters_basic", "{{ '  a b \\n'|trim }}|{{ 'xxaxx'|trim('x') }}|{{ [1, 2]|length }}|{{ 'héllo'|length }}|"
                      "{{ {'a': 1}|length }}|{{ 5|string }}{{ none|string }}|{{ 'hello wORLD'|capitalize }}|"
                      "{{ 'Ab'|upper }}{{ 'Ab'|lower }}|{{ 'a-b-c'|replace('-', '+') }}|{{ [1, 'a']|join(', ') }}|"
                      "{{ [3, 4]|first }}{{ [3, 4]|last }}|{{ 'abc'|list }}|{{ [1, 2]|reverse|list }}|"
                      "{{ '42'|int + 1 }}{{ '4.5'|float }}{{ 'x'|int }}|{{ -3|abs }}|{{ '<a&b>'|e }}", {}),
    ("filters_select", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }}|"
                       "{{ msgs|rejectattr('role', 'eq', 'user')|list|length }}|{{ [0, 1, 2, '']|select|list }}|"
                       "{{ [1, 2, 3, 4]|reject('odd')|list }}|{{ ['a', 'b']|map('upper')|join }}",
     {"msgs": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a"},
               {"role": "user", "content": "u2"}]}),
    ("items_filter", "{{ d|items|list }}", {"d": {"x": 1, "y": [2]}}),
    ("items_not_mapping_error", "{{ 'abc'|items|list }}", {}),
    # tojson (HF override of json.dumps)
    ("tojson_nested", "{{ v|tojson }}", {"v": {"b": [1, 2.0, 3.5, 1e-07, 1e+16, 123456789.0, -0.0, True, None],
                                                "a": {"é": "ü😀\u2028", "q": "\"\\/\n\t\r\b\f\u0001\u007f"},
                                                "e": [], "f": {}}}),
    ("tojson_options", "{{ v|tojson(indent=2) }}|{{ v|tojson(ensure_ascii=True) }}|{{ v|tojson(sort_keys=True) }}|"
                       "{{ v|tojson(separators=(',', ':')) }}", {"v": {"z": [1, {"é": "😀"}], "a": "x"}}),
    ("tojson_string_number", "{{ 'a\"b'|tojson }} {{ 3|tojson }} {{ 2.5|tojson }} {{ none|tojson }}", {}),
    ("tojson_undefined_error", "{{ u|tojson }}", {}),
    # tests
    ("tests", "{{ 'a' is string }}{{ 1 is string }}{{ {} is mapping }}{{ [] is mapping }}{{ [] is iterable }}"
              "{{ 1 is iterable }}{{ 'x' is sequence }}{{ none is none }}{{ 1 is number }}{{ 1.5 is float }}"
              "{{ 1 is integer }}{{ true is integer }}{{ true is boolean }}{{ true is true }}{{ 1 is true }}"
              "{{ false is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is eq 2 }}"
              "{{ 'b' is in 'abc' }}{{ 'abc' is lower }}{{ x is defined }}{{ x is not none }}{{ u is not defined }}"
              "{{ none is sameas none }}{{ range is callable }}", {"x": 0}),
    # string methods
    ("str_methods", "{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}|"
                    "{{ '\\n\\nx\\n'.strip('\\n') }}|{{ 'xxhixx'.lstrip('x') }}|{{ 'xxhixx'.rstrip('x') }}|"
                    "{{ '  p  '.strip() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}"
                    "{{ 'abc'.startswith(('x', 'a')) }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|"
                    "{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'héllo'.find('l') }}|{{ 'banana'.count('an') }}|"
                    "{{ '-'.join(['x', 'y']) }}|{{ 'hello world'.title() }}", {}),
    ("str_split_think", "{% set c = '<think>\\nplan\\n</think>\\n\\nanswer' %}"
                        "[{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}]"
                        "[{{ c.split('</think>')[-1].lstrip('\\n') }}]", {}),
    ("dict_methods", "{{ d.keys()|list }}{{ d.values()|list }}{{ d.get('a') }}{{ d.get('z', 'dflt') }}"
                     "{{ d.get('z') }}", {"d": {"a": 1, "b": 2}}),
    ("unicode_trim", "[{{ s|trim }}]", {"s": "\u3000\u00a0 héllo\u2003\n"}),
    # globals
    ("globals", "{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(3, 0, -1)|list }}"
                "{{ dict(a=1, b='x') }}{{ namespace(a=1).a }}", {}),
    ("raise_exception_error", "{{ raise_exception('custom failure message') }}", {}),
    ("namespace_underscore_error", "{% set ns = namespace(_x=1) %}", {}),
    # more edge cases
    ("ws_tag_at_start", "   {% if true %}x{% endif %}\n  {% if true %}\ny{% endif %}", {}),
    ("ws_macro_body", "{%- macro m(x) -%}\n  <{{ x }}>\n{%- endmacro -%}\n{{ m(1) }}\n{{ m(2) }}\n", {}),
    ("ws_elif_chain", "{% for i in range(4) %}\n  {% if i == 0 %}\n    zero\n  {% elif i == 1 %}\n    one\n"
                      "  {% else %}\n    many\n  {% endif %}\n{% endfor %}", {}),
    ("delims_in_strings", "{{ '{{' ~ '}}' ~ '{%' ~ '%}' }}{{ {'a': {'b': 1}} }}", {}),
    ("floats_repr", "{{ 1/3 }} {{ 1e100 }} {{ 2.0 * 3 }} {{ 1e15 }} {{ 0.0001 }} {{ 123456789.123 }} {{ -1e-300 }}", {}),
    ("join_numbers", "{{ [1, 2.5, none, true]|join('|') }}{{ xs|join }}", {"xs": ["a", "b"]}),
    ("default_no_args", "[{{ u|default }}][{{ false|default('x') }}][{{ false|d('x', true) }}]", {}),
    ("loop_filter_previtem", "{% for x in xs if x %}{{ loop.previtem }}>{{ x }} {% endfor %}", {"xs": [0, 1, 0, 2, 3]}),
    ("loop_over_items_of_list_dicts", "{% for m in ms %}{% for k, v in m.items() %}{{ k }}:{{ v|tojson }} {% endfor %}"
                                      "{% endfor %}", {"ms": [{"a": 1.5, "b": "x"}, {"c": [None]}]}),
    ("division_by_zero_error", "{{ 1 / 0 }}", {}),
    ("int_filter_edge", "{{ '12'|int }} {{ ' 7 '|int }} {{ '3.9'|int }} {{ 3.9|int }} {{ none|int }} {{ 'x'|int(5) }}", {}),
    ("nested_namespace_in_macro", "{% set ns = namespace(c=0) %}{% macro inc() %}{% set ns.c = ns.c + 1 %}{% endmacro %}"
                                  "{{ inc() }}{{ inc() }}{{ ns.c }}", {}),
    # syntax errors (jinja2 reports them at compile time)
    ("include_error", "{% include 'x.html' %}", {}),
    ("unknown_filter_error", "{{ 1|nosuchfilter }}", {}),
    ("unterminated_var_error", "a {{ b ", {}),
    ("unterminated_block_error", "{% if true %}x", {}),
    ("call_block_error", "{% call f() %}x{% endcall %}", {}),
]


def render_feature(src, ctx):
    try:
        return {"expected": _compile_jinja_template(src).render(**ctx)}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    cases = json.loads((FIX / "cases.json").read_text(encoding="utf-8"))
    goldens = []
    for name in TEMPLATES:
        tpl = (FIX / name).read_text(encoding="utf-8")
        for case in cases:
            goldens.append({"template": name, "case": case["name"], **render_case(tpl, case)})
    meta = {"generator": "tools/gen_template_goldens.py", "jinja2": jinja2.__version__,
            "transformers": transformers.__version__}
    (FIX / "goldens.json").write_text(json.dumps({"meta": meta, "goldens": goldens}, ensure_ascii=False, indent=1),
                                      encoding="utf-8")
    feats = [{"name": n, "template": t, "context": c, **render_feature(t, c)} for n, t, c in FEATURES]
    (FIX / "features.json").write_text(json.dumps({"meta": meta, "features": feats}, ensure_ascii=False, indent=1),
                                       encoding="utf-8")
    n_err = sum("error" in g for g in goldens)
    print(f"{len(goldens)} goldens ({n_err} errors), {len(feats)} features")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# `tern chat` driven in a real terminal (tmux send-keys / capture-pane): streaming answers, a second turn that
# processes only its own tokens (visible in the speed line), /reset, and Ctrl-C stopping an answer without
# leaving the chat.
set -u
TERN=$1
FIX=$2
M=${TERN_CHAT_MODEL:-$FIX/../../models/tern-tiny-q35moe.gguf}
[ -f "$M" ] || M=$FIX/models/q35-ratio.f16.gguf
command -v tmux >/dev/null || { echo "FAIL: tmux is not installed (scripts/install-deps.sh installs it)"; exit 1; }
S=tern-chat-test-$$
# A private tmux server with no user config, and a shell that exists: CI images may set SHELL to something
# tmux cannot run, which kills the pane (and the server) at once.
export SHELL=/bin/bash
tmux() { command tmux -L "$S" -f /dev/null "$@"; }
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails+1)); fi; }
screen() { tmux capture-pane -p -t "$S" -S -2000; }
wait_for() {  # wait_for PATTERN SECONDS: until the pane shows PATTERN
  for _ in $(seq 1 $(( $2 * 10 ))); do screen | grep -q -- "$1" && return 0; sleep 0.1; done; return 1
}
count() { screen | grep -c -- "$1"; }

tmux new-session -d -s "$S" -x 200 -y 50 "$TERN chat -m $M -t 2 -c 16384 -n 3000 --temp 0 --ignore-eos; echo CHAT-EXITED; sleep 30"
trap 'tmux kill-server 2>/dev/null' EXIT
tmux set-option -t "$S" remain-on-exit on 2>/dev/null
tmux ls >/dev/null 2>&1 || { echo "FAIL: the tmux session died at once (SHELL=$SHELL, TERM=${TERM:-unset})"; exit 1; }
check "chat starts and shows a prompt" 'wait_for "^>" 60'

tmux send-keys -t "$S" "Tell me a story about a small bird." Enter
check "first answer streams and ends with a speed line" 'wait_for "\[prompt: .* new tokens" 180'
first=$(screen | grep -o "prompt: [0-9]* new tokens" | tail -1 | grep -o "[0-9]*")

tmux send-keys -t "$S" "And then?" Enter
wait_for_2() { for _ in $(seq 1 1800); do [ "$(count "\[prompt: .* new tokens")" -ge 2 ] && return 0; sleep 0.1; done; return 1; }
check "second turn speed line appears" 'wait_for_2'
second=$(screen | grep -o "prompt: [0-9]* new tokens" | tail -1 | grep -o "[0-9]*")
check "second turn processes only its own tokens ($second new < $first + 24)" '[ -n "$second" ] && [ "$second" -lt $((first + 10)) ] && [ "$second" -lt 40 ]'
check "context grew past one turn" 'screen | grep -q "context [0-9]*/"'

tmux send-keys -t "$S" "/reset" Enter
check "/reset acknowledged" 'wait_for "conversation reset" 10'

# A long answer interrupted by Ctrl-C: the chat stays open and shows the prompt again.
tmux send-keys -t "$S" "/system You are verbose." Enter
check "/system acknowledged" 'wait_for "system message set" 10'
tmux send-keys -t "$S" "Write a very long text." Enter
# Interrupt as soon as the answer starts streaming (the line after the question gains text).
for _ in $(seq 1 300); do screen | grep -A1 "Write a very long text" | tail -n 1 | grep -q "[a-z]" && break; sleep 0.05; done
tmux send-keys -t "$S" C-c
check "Ctrl-C stops the answer" 'wait_for "\[stopped\]" 30'
tmux send-keys -t "$S" "Still there?" Enter
wait_3() { for _ in $(seq 1 1800); do [ "$(count "\[prompt: .* new tokens")" -ge 4 ] && return 0; sleep 0.1; done; return 1; }
check "chat still answers after Ctrl-C" 'wait_3'
check "chat did not exit" '! screen | grep -q CHAT-EXITED'
# Ctrl-C at the prompt drops the line being typed and keeps the chat open.
tmux send-keys -t "$S" "half a line" C-c
sleep 0.5
check "Ctrl-C at the prompt keeps the chat" '! screen | grep -q CHAT-EXITED'
tmux send-keys -t "$S" "/exit" Enter
check "/exit leaves" 'wait_for CHAT-EXITED 10'
[ $fails -eq 0 ] || { echo "--- screen:"; screen; }
echo "$fails failed"
[ $fails -eq 0 ]

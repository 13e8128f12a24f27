#!/usr/bin/env bash
# `tern chat` driven in a real terminal (tmux send-keys / capture-pane): streaming answers, a second turn that
# processes only its own tokens (visible in the speed line), /reset, and Ctrl-C stopping an answer without
# leaving the chat.
set -u
TERN=$1
FIX=$2
M=${TERN_CHAT_MODEL:-$FIX/../../models/tern-tiny-q35moe.gguf}
[ -f "$M" ] || M=$FIX/models/q35-ratio.f32.gguf
command -v tmux >/dev/null || { echo "FAIL: tmux is not installed (scripts/install-deps.sh installs it)"; exit 1; }
S=tern-chat-test-$$
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails+1)); fi; }
screen() { tmux capture-pane -p -t "$S" -S -200; }
wait_for() {  # wait_for PATTERN SECONDS: until the pane shows PATTERN
  for _ in $(seq 1 $(( $2 * 10 ))); do screen | grep -q -- "$1" && return 0; sleep 0.1; done; return 1
}
count() { screen | grep -c -- "$1"; }

tmux new-session -d -s "$S" -x 200 -y 50 "$TERN chat -m $M -t 2 -c 2048 -n 24 --temp 0 --ignore-eos; echo CHAT-EXITED; sleep 30"
trap 'tmux kill-session -t "$S" 2>/dev/null' EXIT
check "chat starts and shows a prompt" 'wait_for "^> " 60'

tmux send-keys -t "$S" "Tell me a story about a small bird." Enter
check "first answer streams and ends with a speed line" 'wait_for "\[prompt: .* new tokens" 60'
first=$(screen | grep -o "prompt: [0-9]* new tokens" | tail -1 | grep -o "[0-9]*")

tmux send-keys -t "$S" "And then?" Enter
wait_for_2() { for _ in $(seq 1 600); do [ "$(count "\[prompt: .* new tokens")" -ge 2 ] && return 0; sleep 0.1; done; return 1; }
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
sleep 1.5
tmux send-keys -t "$S" C-c
check "Ctrl-C stops the answer" 'wait_for "\[stopped\]" 30 || wait_for "\[prompt: " 30'
tmux send-keys -t "$S" "Still there?" Enter
wait_3() { for _ in $(seq 1 600); do [ "$(count "\[prompt: .* new tokens")" -ge 4 ] && return 0; sleep 0.1; done; return 1; }
check "chat still answers after Ctrl-C" 'wait_3'
check "chat did not exit" '! screen | grep -q CHAT-EXITED'
tmux send-keys -t "$S" "/exit" Enter
check "/exit leaves" 'wait_for CHAT-EXITED 10'
[ $fails -eq 0 ] || { echo "--- screen:"; screen; }
echo "$fails failed"
[ $fails -eq 0 ]

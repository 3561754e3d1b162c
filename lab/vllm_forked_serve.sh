#!/bin/bash
# A vLLM peer's run_serve.sh (../shared/peers/vllm*/) with the engine cores forked instead of
# spawned (vllm_forked_cli.py says why). PEER is the peer directory (default ~/.cache/vllm-peer-0.33);
# the arguments are those of run_serve.sh.
#
# With VLLM_PREFORK=SOCKET the launch is a fork of a server that imported vLLM once
# (vllm_prefork.py); `vllm_forked_serve.sh --prefork-server SOCKET` runs that server.
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "${PEER:-$HOME/.cache/vllm-peer-0.33}" || exit 2
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_TARGET_DEVICE=cpu \
       VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_SERVER_DEV_MODE=1 \
       PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ "$1" = "--prefork-server" ]; then
  exec ./venv/bin/python "$HERE/vllm_prefork.py" server "$2"
fi
if [ -n "$VLLM_PREFORK" ]; then
  CLI=("$HERE/vllm_prefork.py" launch "$VLLM_PREFORK")
else
  CLI=("$HERE/vllm_forked_cli.py")
fi
exec timeout "${TMO:-600}" ./venv/bin/python "${CLI[@]}" serve "${MODEL:-$PWD/models/tiny-llama}" \
  --port "${PORT:-18000}" --max-model-len 256 --dtype float32 --enforce-eager \
  --distributed-executor-backend fake_executor.FakeExecutor "$@"

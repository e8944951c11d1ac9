# A DeepSpeed 0.18.9 lane on the GPU host (issue 15), sourced after bench/gpu/prelude.sh by bench/onebit/*.sh:
#     source bench/onebit/lane18.sh .whl18
# .whl18 is the wheelhouse `bench/gpu/wheelhouse.sh .whl18 0.18.9` built here. Only its DeepSpeed wheel is used:
# it goes into /tmp/site18 (--target, like the prelude's /tmp/site), and $lane18 is a two-line interpreter that
# puts /tmp/site18 first on PYTHONPATH and runs python3. That is needed because the prelude's PYTHONPATH holds
# /tmp/site with DeepSpeed 0.19.8, which the ranks inherit and which would come before any site-packages of a venv;
# everything else (torch, transformers, cupy from the host; pydantic, hjson from /tmp/site) is shared.
_wh18=${1:-.whl18}
_ds18=$(ls "$_wh18"/deepspeed-0.18.9-*.whl 2>/dev/null | head -n 1)
if [ -z "$_ds18" ]; then
  echo "bench/onebit/lane18.sh: no deepspeed-0.18.9 wheel in '$_wh18' (build it here with bench/gpu/wheelhouse.sh $_wh18 0.18.9)" >&2
  unset _wh18 _ds18
  return 1
fi
if [ ! -f /tmp/site18/deepspeed/__init__.py ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site18 "$_ds18" || return 1
fi
mkdir -p /tmp/lane18
printf '#!/bin/sh\nPYTHONPATH=/tmp/site18${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' "$(command -v python3)" \
  >/tmp/lane18/python
chmod +x /tmp/lane18/python
lane18=/tmp/lane18/python
unset _wh18 _ds18

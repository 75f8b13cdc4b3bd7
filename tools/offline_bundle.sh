#!/bin/bash
# An offline bundle for a GPU host without network: the wheels of vLLM and of what
# sparkserve needs, sparkserve's own packages, and an install script, all in one folder
# to copy to the host (docs/gpu-check.md).
#
# usage: tools/offline_bundle.sh OUT_DIR [options]      (on a machine with network)
#   --vllm VERSION          the CUDA vLLM to bundle (default 0.32.0, the image's)
#   --python X.Y            the host's Python (default 3.12); wheels are picked for it
#   --arch x86_64|aarch64   the host's processor (default x86_64)
#   --host-packages FILE    what the host already has, `pip list --format freeze` there:
#                           each NAME==VERSION becomes an empty stub wheel, so pip takes
#                           the host's own (torch, say) and bundles only what it lacks
#   --stub NAME==VERSION    a package not to bundle although vLLM asks for it (repeatable;
#                           e.g. flashinfer-python==0.6.12: with --gdn-prefill-backend
#                           triton, vLLM 0.24 never imports it for the GDN hybrids); it
#                           wins over the host's line of that package: where vLLM pins
#                           numba==0.65.0 and the host has 0.68.0, --stub numba==0.65.0
#                           lets pip resolve and the host keeps its own
#   --extra SPEC            one more requirement to bundle (repeatable; e.g. ray==2.60.0)
#   --prometheus            Debian bookworm's Prometheus binary too (needs apt-get, dpkg)
#   --split SIZE            also OUT_DIR/parts/bundle.tar.NN in parts of SIZE (split -b
#                           syntax, e.g. 56m) for copies with a size limit
# Needs pip (any Python), git, and this checkout. OUT_DIR gets:
#   whl/            the wheels (pip download --only-binary for the host's platform), and
#                   sparkserve's own (it registers the draft-vocabulary plugin)
#   src/            sparkserve's packages ($SOURCES) and pyproject.toml, from git HEAD
#   prometheus.xz   with --prometheus
#   install.sh      on the host: pip install --no-index --no-deps whl/*.whl (+ Prometheus)
#   SHA256SUMS      of every file above; install.sh checks them first
# Then, on the host: `bash OUT_DIR/install.sh`, and
#   PYTHONPATH=OUT_DIR/src python3 -m entrypoint.gpu_check --out /tmp/gpu-check
set -euo pipefail

# sparkserve's packages the runtime needs (python -m entrypoint, python -m
# entrypoint.gpu_check, python -m gateway, the draft-vocabulary plugin), copied as sources.
SOURCES="budget entrypoint gateway draftvocab"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
die() { echo "offline_bundle: $*" >&2; exit 2; }

[ $# -ge 1 ] && [ "${1#-}" = "$1" ] || usage
out=$1; shift
vllm=0.32.0 python=3.12 arch=x86_64 host_list="" prometheus=0 split_size=""
stubs=() extras=()
while [ $# -gt 0 ]; do
    case "$1" in
        --vllm) vllm=${2:?--vllm needs a version}; shift 2 ;;
        --python) python=${2:?--python needs X.Y}; shift 2 ;;
        --arch) arch=${2:?--arch needs x86_64 or aarch64}; shift 2 ;;
        --host-packages) host_list=${2:?--host-packages needs a file}; shift 2 ;;
        --stub) stubs+=("${2:?--stub needs NAME==VERSION}"); shift 2 ;;
        --extra) extras+=("${2:?--extra needs a requirement}"); shift 2 ;;
        --prometheus) prometheus=1; shift ;;
        --split) split_size=${2:?--split needs a size}; shift 2 ;;
        -h|--help) usage ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
[[ $python =~ ^3\.[0-9]+$ ]] || die "--python $python: must be X.Y, e.g. 3.12"
[ "$arch" = x86_64 ] || [ "$arch" = aarch64 ] || die "--arch $arch: must be x86_64 or aarch64"
[ -z "$host_list" ] || [ -r "$host_list" ] || die "--host-packages $host_list: cannot read it"
[ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ] && die "$out exists and is not empty"
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"/whl "$out"/src
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/stubs "$work"/dl

# Empty stub wheels and their pins: what the host has (its own versions) and what is not
# wanted there; a --stub wins over the host's line of the same package (tools/bundle_stubs.py).
stub_args=()
[ -z "$host_list" ] || stub_args+=(--host-packages "$host_list")
for spec in "${stubs[@]}"; do stub_args+=(--stub "$spec"); done
python3 "$repo/tools/bundle_stubs.py" "$work/stubs" "$work/constraints.txt" "${stub_args[@]}" \
    || exit 2

# sparkserve's own requirements, read from pyproject.toml (one list, never retyped here).
mapfile -t needs < <(python3 - "$repo/pyproject.toml" <<'EOF'
import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))
EOF
)
platforms=()
for tag in manylinux_2_17 manylinux2014 manylinux_2_24 manylinux_2_27 manylinux_2_28 \
    manylinux_2_31 manylinux_2_34 manylinux_2_35 manylinux_2_39 linux; do
    platforms+=(--platform "${tag}_${arch}")
done
[ "$arch" = x86_64 ] && platforms+=(--platform manylinux1_x86_64)
python3 -m pip download --only-binary=:all: --python-version "$python" \
    --implementation cp "${platforms[@]}" --find-links "$work/stubs" -c "$work/constraints.txt" \
    -d "$work/dl" "vllm==$vllm" "${needs[@]}" "${extras[@]}" \
    || die "pip could not resolve vllm==$vllm against the stubs (its reasons are above). Where \
vLLM pins a version of a package the host has at another version, pass --stub NAME==PIN: \
it replaces the host's line, and the host keeps its own version."
for whl in "$work"/dl/*.whl; do  # every wheel but the stubs
    [ -e "$work/stubs/$(basename "$whl")" ] || cp "$whl" "$out/whl/"
done

git -C "$repo" archive HEAD $SOURCES pyproject.toml | tar x -C "$out/src"
# sparkserve itself as a wheel as well: vLLM finds the draft-vocabulary plugin through the
# entry points of installed packages (vllm.general_plugins), never through PYTHONPATH.
mkdir -p "$work/project" && git -C "$repo" archive HEAD | tar x -C "$work/project"
python3 -m pip wheel --quiet --no-deps -w "$out/whl" "$work/project"

if [ "$prometheus" = 1 ]; then
    deb_arch=$([ "$arch" = x86_64 ] && echo amd64 || echo arm64)
    (cd "$work" && apt-get -o APT::Architecture="$deb_arch" download prometheus)
    dpkg -x "$work"/prometheus_*.deb "$work/prom"
    xz -9 -c "$work/prom/usr/bin/prometheus" > "$out/prometheus.xz"
fi

cat > "$out/install.sh" <<'EOF'
#!/bin/bash
# Install this bundle on the host, from its own files only (no network).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
(cd "$here" && sha256sum --quiet -c SHA256SUMS)
python3 -m pip install --no-index --no-deps --no-cache-dir "$here"/whl/*.whl
if [ -f "$here/prometheus.xz" ]; then
    mkdir -p "$here/bin" && xz -dc "$here/prometheus.xz" > "$here/bin/prometheus"
    chmod +x "$here/bin/prometheus" && echo "prometheus: $here/bin/prometheus"
fi
python3 -c 'import vllm; print("vllm", vllm.__version__)'
echo "next: PYTHONPATH=$here/src python3 -m entrypoint.gpu_check --out /tmp/gpu-check"
EOF
chmod +x "$out/install.sh"
(cd "$out" && find whl src -type f -print0 | sort -z | xargs -0 sha256sum > SHA256SUMS \
    && { [ ! -f prometheus.xz ] || sha256sum prometheus.xz >> SHA256SUMS; })

if [ -n "$split_size" ]; then
    mkdir -p "$work/parts"
    tar cf - -C "$out" . | split -b "$split_size" -d -a 2 - "$work/parts/bundle.tar."
    mv "$work/parts" "$out/parts"
    (cd "$out/parts" && sha256sum bundle.tar.* > SHA256SUMS)
    echo "parts: $out/parts (on the host: cat bundle.tar.* | tar x -C DIR)"
fi
echo "$(ls "$out/whl" | wc -l) wheels, $(du -sh "$out/whl" | cut -f1); sources: $SOURCES"
echo "bundle: $out (copy it to the host, then: bash $out/install.sh)"

#!/usr/bin/env bash
# Installs every Debian package Sluice needs to build, test, benchmark and run its demo.
# Idempotent: packages already present are left alone, and apt is only called (with one
# `apt-get update` first) when something is missing. Works as root; uses sudo otherwise.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # core libraries
  libabsl-dev libyaml-cpp-dev nlohmann-json3-dev
  # image codecs and processing
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev
  libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev
  # remote workers: gRPC, protobuf, wire compression
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler liblz4-dev libzstd-dev
  libssl-dev openssl
  # data over HTTP(S) (tar shards on a web server or object store)
  libcurl4-openssl-dev
  # audio: FFT
  libkissfft-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # fuzzing (make fuzz: clang with libFuzzer and the sanitizer runtimes) and a compiler cache
  clang-14 libclang-rt-14-dev ccache
  # operations: metrics served over HTTP, checked by promtool and scraped by a real Prometheus
  # in the tests; systemd-analyze checks the unit in deploy/systemd
  libcpp-httplib-dev prometheus systemd
  # python side: baselines (PyTorch DataLoader) and plots
  python3 python3-numpy python3-pytest python3-torch python3-torchvision python3-pil
  python3-matplotlib python3-yaml python3-scipy
  # the Python package (sluice._core) and its offline install (pip install ./python)
  pybind11-dev python3-dev python3-setuptools python3-wheel python3-pip
)

# kubectl renders deploy/k8s offline (kubectl kustomize). Debian's kubernetes-client provides
# it; a kubectl already on PATH (from another source) is used as it is.
if ! command -v kubectl >/dev/null 2>&1; then
  PACKAGES+=(kubernetes-client)
fi

# Remote data tests: curl's own S3 signer uploads to s3rver, an S3-compatible server from npm
# (installed below). Debian's nodejs and npm provide npm unless one is already on PATH.
PACKAGES+=(curl)
if ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(nodejs npm)
fi

# s3rver from npm, once the apt packages (npm among them) are in.
install_npm_tools() {
  if ! command -v s3rver >/dev/null 2>&1; then
    echo "install-deps: installing s3rver (npm)"
    $SUDO npm install -g --no-fund --no-audit s3rver@3
  fi
}

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  install_npm_tools
  exit 0
fi

if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
  echo "install-deps: not root and no sudo; install these packages: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
install_npm_tools
echo "install-deps: done"

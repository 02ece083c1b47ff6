#!/usr/bin/env bash
# Builds every target and runs the fast unit tests with Debian's offline Bazel.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if ! command -v bazel >/dev/null || [ ! -d /usr/src/bazel-bootstrap/mock_repos ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    bazel-bootstrap bazel-bootstrap-source >/dev/null
fi
mocks=/usr/src/bazel-bootstrap/mock_repos
{
  for repo in rules_cc platforms bazel_skylib rules_java rules_proto; do
    echo "build --override_repository=$repo=$mocks/$repo"
  done
  echo "build --override_repository=remote_coverage_tools=$root/third_party/remote_coverage_tools"
  # Tests read the converted caches and the shared data in place.
  echo "test --test_env=TFF_HPO_CACHE_DIR=$root/.cache/tff"
  echo "test --test_env=TFF_HPO_SHARED_DATA=$(cd "$root/../shared/datasets" && pwd)"
  echo "test --test_env=TF_CPP_MIN_LOG_LEVEL=2"
} > .bazelrc.local
# The autodetected Python toolchain runs `python3` from PATH: the project's venv.
export PATH="$root/.venv/bin:$PATH"
bazel build //...
bazel test --test_tag_filters=-slow //...

# What the bench label's test scripts share; each sources it as its first line:
#   test_name=bench.NAME; source "$(dirname "$0")/testing.sh" "$1"
# It sets -euo pipefail, makes $build the build folder ($1, absolute), works from the source root,
# gives a scratch folder $work (removed on exit) and fail MESSAGE (prints "$test_name: MESSAGE"
# on stderr and exits 1).
set -euo pipefail
build=$(cd "$1" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "$test_name: $*" >&2
  exit 1
}

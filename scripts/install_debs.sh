# Sourced by scripts/setup.sh and scripts/setup_s3.sh.
# flag_arg FLAG [ARG]: the scripts' one optional flag; prints 1 when ARG is
# FLAG, 0 when there is no ARG, and is a usage error (exit 2) otherwise:
#   bench=$(flag_arg --bench "$@")
flag_arg() {
  case "${2:-}" in
    "") echo 0 ;;
    "$1") echo 1 ;;
    *) echo "usage: $0 [$1]" >&2; exit 2 ;;
  esac
}

# install_debs PKG... installs the Debian packages of the list that are not
# installed yet (with sudo when not root), and does nothing when all are.
install_debs() {
  local p missing=() SUDO=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

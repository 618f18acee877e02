# Running a client helper's README as a user would (test/clients, test/netfault):
# its examples extracted, its install steps run verbatim. Source it after
# scripts/lib.sh, from the repository root; install_as_readme uses $WORK (the
# suite's scratch directory) and $ROOT (the checkout).
# shellcheck shell=bash

# extract_example README TAG [N]: the Nth (default first) ```TAG block of README.
extract_example() {
    awk -v tag="$2" -v n="${3:-1}" '$0 == "```" tag { seen++; if (seen == n) { inside = 1; next } }
        inside && /^```/ { exit } inside' "$1"
}

# install_as_readme README DIR: runs the README's install steps (its first ```sh
# block) in DIR as a new user on Debian 12 would: the "sudo apt install" line
# through ensure_packages, the rest verbatim with HOME=$WORK/home, Debian's
# PATH, and /path/to/lease meaning this checkout. Output in DIR/install.log.
install_as_readme() {
    local readme=$1 dir=$2 script apt
    script=$(extract_example "$readme" sh)
    mkdir -p "$dir" "$WORK/home"
    apt=$(printf '%s\n' "$script" | sed -n 's/^sudo apt install //p')
    # shellcheck disable=SC2086 # a list of package names
    if [ -n "$apt" ] && ! ensure_packages $apt >"$dir/install.log" 2>&1; then
        return 1
    fi
    printf '%s\n' "$script" | grep -v '^sudo apt install ' | sed "s|/path/to/lease|$ROOT|g" >"$dir/install.sh"
    (cd "$dir" && HOME=$WORK/home PATH=/usr/bin:/bin bash -e -x install.sh) >>"$dir/install.log" 2>&1
}

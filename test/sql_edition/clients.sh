#!/usr/bin/env bash
# test/sql_edition/clients.sh [cli] [clients]: pg_lease's suite (test/cli)
# and the client helpers' suite (test/clients: Python directly and through
# PgBouncer, Go, Node, Java) against the SQL edition (docs/sql-edition.md),
# unchanged but for LEASE_EDITION=sql (scripts/lib.sh, edition_pgbin and
# edition_install): each runs its own cluster on a PostgreSQL tree without
# the extension's files, where lease_owner (not superuser, the database's
# owner) installs sql-edition/lease.sql with psql -f, and connects as
# lease_owner. Each helper is installed as its README says, as the suite
# always does. Ports LEASE_TEST_PORT (default 58471) and the next ten.
#
# Prints the suites' TAP lines, one renumbered series, each line prefixed
# with its suite ("cli: ", "clients: "), and "sql_edition_clients: P passed,
# F failed"; exits non-zero on any failure. While the edition lacks what
# some checks use (docs/sql-edition.md, "Tests", lists them), it fails.
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
# shellcheck source=test/common/tap.sh
. test/common/tap.sh

port=${LEASE_TEST_PORT:-58471}
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(cli clients)
for suite in "${suites[@]}"; do
    case $suite in
    cli) offset=0 ;;
    clients) offset=5 ;;
    *)
        report 1 "unknown suite $suite (cli or clients)"
        continue
        ;;
    esac
    started=$SECONDS
    summary=
    while IFS= read -r line; do
        case $line in
        "ok "*) report 0 "$suite: $(sed -E 's/^ok [0-9]+ - //' <<<"$line")" ;;
        "not ok "*) report 1 "$suite: $(sed -E 's/^not ok [0-9]+ - //' <<<"$line")" ;;
        "$suite: "*" passed, "*" failed") summary=$line ;;
        *) printf '%s\n' "$line" ;;
        esac
    done < <(LEASE_EDITION=sql LEASE_TEST_PORT=$((port + offset)) bash "test/$suite/run.sh" 2>&1)
    # A suite that ended without its summary line failed somewhere no check saw.
    [ -n "$summary" ] || report 1 "$suite: the suite ran to its summary line"
    echo "# $suite against the SQL edition: ${summary:-no summary} ($((SECONDS - started)) s)"
done
report_summary sql_edition_clients

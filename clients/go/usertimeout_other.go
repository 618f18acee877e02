//go:build !linux

package pglease

import "github.com/jackc/pgx/v4"

// withUserTimeout: TCP_USER_TIMEOUT is Linux's; elsewhere the watcher finds a
// partition only when TCP gives up on its own.
func withUserTimeout(*pgx.ConnConfig) {}

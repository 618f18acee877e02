package pglease

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v4"
)

// TCP_USER_TIMEOUT of <netinet/tcp.h> (Linux 2.6.37+); package syscall does
// not name it.
const tcpUserTimeout = 0x12

// withUserTimeout makes the watcher's TCP connections break when data sent
// goes unacknowledged for answerTimeout (or the connection string's
// tcp_user_timeout, in ms, as libpq reads it): a partition breaks the
// connection instead of leaving it waiting forever.
func withUserTimeout(config *pgx.ConnConfig) {
	timeout := answerTimeout
	if ms, err := strconv.Atoi(config.RuntimeParams["tcp_user_timeout"]); err == nil {
		timeout = time.Duration(ms) * time.Millisecond
	}
	dial := config.DialFunc
	config.DialFunc = func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := dial(ctx, network, address)
		if tcp, ok := conn.(*net.TCPConn); ok && err == nil {
			if raw, rawErr := tcp.SyscallConn(); rawErr == nil {
				raw.Control(func(fd uintptr) { //nolint:errcheck // best effort, as libpq's
					syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(timeout/time.Millisecond)) //nolint:errcheck
				})
			}
		}
		return conn, err
	}
}

package pglease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

const (
	sessionOpenSQL      = "SELECT lease.session_open($1, $2::pg_catalog.interval, false)"
	sessionKeepaliveSQL = "SELECT lease.session_keepalive($1::pg_catalog.int8)"
	sessionCloseSQL     = "SELECT lease.session_close($1::pg_catalog.int8)"
	sessionAcquireSQL   = "SELECT lease.session_acquire($1::pg_catalog.int8, $2, $3::pg_catalog.interval)"
	claimSQL            = "SELECT name, token, state::pg_catalog.text FROM lease.claim($1, $2::pg_catalog.int8, $3::pg_catalog.int4)"
	surplusSQL          = "SELECT name FROM lease.surplus($1, $2::pg_catalog.int8) AS name"
	checkpointSQL       = "SELECT lease.checkpoint($1, $2::pg_catalog.int8, $3::pg_catalog.jsonb)"

	sessionSemaphoreAcquireSQL = "SELECT lease.session_semaphore_acquire($1::pg_catalog.int8, $2, $3::pg_catalog.int4, $4::pg_catalog.interval)"
	sessionSharedAcquireSQL    = "SELECT lease.session_acquire_shared($1::pg_catalog.int8, $2, $3::pg_catalog.interval)"
	sessionAcquireAllSQL       = "SELECT lease.session_acquire_all($1::pg_catalog.int8, $2::pg_catalog.text[], $3::pg_catalog.interval)"
)

var errNoPool = errors.New("pglease: the pool name must not be empty")

// Session is a session of the lease extension (docs/concepts.md, "Sessions"):
// one keepalive, every TTL/3, for every lease acquired or claimed under it,
// with the loss signal of a Lease (the context OpenSession returned, Err).
// Acquire, Claim, Surplus and the leases' Release and Checkpoint run on a
// second connection of the helper's, so a waiting Acquire never delays a
// keepalive. It is not bound to its connection, so it works through
// PgBouncer in transaction mode. Its methods are safe for concurrent use.
type Session struct {
	l   *Lease
	mu  sync.Mutex // guards ops
	ops *pgx.Conn
}

// OpenSession opens a session and keeps it alive until Close. config, ctx and
// opts (TTL, Grace, Owner; Wait is not used) are as for Hold; the returned
// context is cancelled when the session is lost or closed.
func OpenSession(ctx context.Context, config *pgx.ConnConfig, opts Options) (*Session, context.Context, error) {
	l, err := newLease(ctx, config, "session", Options{Owner: opts.Owner, TTL: opts.TTL, Grace: opts.Grace})
	if err != nil {
		return nil, nil, err
	}
	l.session = true
	sent := time.Now()
	ttl := fmt.Sprintf("%d milliseconds", l.ttl.Milliseconds())
	if err := l.call(ctx, sent.Add(l.trust), sessionOpenSQL, []interface{}{l.owner, ttl}, &l.token); err != nil {
		l.disconnect()
		return nil, nil, err
	}
	l.lastSuccess = sent
	return &Session{l: l}, l.start(ctx), nil
}

// ID is the session's id.
func (s *Session) ID() int64 {
	if s == nil {
		return 0
	}
	return s.l.token
}

// Err is nil while the session is live, and an error wrapping ErrLost once
// it is lost.
func (s *Session) Err() error {
	if s == nil {
		return errNoLease
	}
	return s.l.Err()
}

// Close stops the keepalives and closes the session, which releases every
// lease it still holds at once; it returns Err() if the session had been lost.
func (s *Session) Close() error {
	if s == nil {
		return errNoLease
	}
	err := s.l.Release()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ops != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.ops.Close(closeCtx) //nolint:errcheck // the connection is being dropped
		s.ops = nil
	}
	return err
}

// Acquire acquires lease name under the session, waiting up to wait in the
// server's queue; ErrNotAcquired after it.
func (s *Session) Acquire(ctx context.Context, name string, wait time.Duration, opts ...AcquireOptions) (*SessionLease, error) {
	if s == nil {
		return nil, errNoLease
	}
	if ctx == nil {
		return nil, errNoContext
	}
	if name == "" {
		return nil, errNoName
	}
	if wait < 0 {
		return nil, errNegativeWait
	}
	var kind AcquireOptions
	for _, o := range opts {
		kind = o
	}
	if err := checkKind(kind.Permits, kind.Shared); err != nil {
		return nil, err
	}
	var token *int64
	err := s.query(ctx, func(conn *pgx.Conn) error {
		waitText := fmt.Sprintf("%d microseconds", wait.Microseconds())
		switch {
		case kind.Permits > 0:
			return conn.QueryRow(ctx, sessionSemaphoreAcquireSQL, s.l.token, name, kind.Permits, waitText).Scan(&token)
		case kind.Shared:
			return conn.QueryRow(ctx, sessionSharedAcquireSQL, s.l.token, name, waitText).Scan(&token)
		}
		return conn.QueryRow(ctx, sessionAcquireSQL, s.l.token, name, waitText).Scan(&token)
	})
	if err != nil {
		return nil, err
	}
	if token == nil {
		return nil, ErrNotAcquired
	}
	return &SessionLease{session: s, name: name, token: *token}, nil
}

// Claim claims the new grants of the session's fair share of pool (at most
// max of them; max <= 0: no limit), each with the state its last holder
// checkpointed (JSON).
// AcquireOptions of Session.Acquire, as in Options: Permits > 0 acquires one
// of that many permits of semaphore name (lease.session_semaphore_acquire),
// Shared a shared grant (lease.session_acquire_shared).
type AcquireOptions struct {
	Permits int
	Shared  bool
}

// AcquireAll acquires every lease of names under the session, or none
// (lease.session_acquire_all), waiting up to wait (then ErrNotAcquired): one
// SessionLease with a token per name (TokenOf, Tokens).
func (s *Session) AcquireAll(ctx context.Context, names []string, wait time.Duration) (*SessionLease, error) {
	if s == nil {
		return nil, errNoLease
	}
	if ctx == nil {
		return nil, errNoContext
	}
	if err := checkNames(names); err != nil {
		return nil, err
	}
	if wait < 0 {
		return nil, errNegativeWait
	}
	var tokens []int64
	err := s.query(ctx, func(conn *pgx.Conn) error {
		waitText := fmt.Sprintf("%d microseconds", wait.Microseconds())
		return conn.QueryRow(ctx, sessionAcquireAllSQL, s.l.token, names, waitText).Scan(&tokens)
	})
	if err != nil {
		return nil, err
	}
	if tokens == nil {
		return nil, ErrNotAcquired
	}
	return &SessionLease{session: s, name: strings.Join(names, ", "), names: append([]string(nil), names...), tokens: tokens}, nil
}

func (s *Session) Claim(ctx context.Context, pool string, max int) ([]*SessionLease, error) {
	if s == nil {
		return nil, errNoLease
	}
	if ctx == nil {
		return nil, errNoContext
	}
	if pool == "" {
		return nil, errNoPool
	}
	var limit *int32
	if max > 0 {
		m := int32(max)
		limit = &m
	}
	var claimed []*SessionLease
	err := s.query(ctx, func(conn *pgx.Conn) error {
		claimed = nil
		rows, err := conn.Query(ctx, claimSQL, pool, s.l.token, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			c := &SessionLease{session: s}
			var state string
			if err := rows.Scan(&c.name, &c.token, &state); err != nil {
				return err
			}
			c.state = json.RawMessage(state)
			claimed = append(claimed, c)
		}
		return rows.Err()
	})
	return claimed, err
}

// Surplus names the leases this session holds in pool beyond its fair
// share, for it to release.
func (s *Session) Surplus(ctx context.Context, pool string) ([]string, error) {
	if s == nil {
		return nil, errNoLease
	}
	if ctx == nil {
		return nil, errNoContext
	}
	if pool == "" {
		return nil, errNoPool
	}
	var names []string
	err := s.query(ctx, func(conn *pgx.Conn) error {
		names = nil
		rows, err := conn.Query(ctx, surplusSQL, pool, s.l.token)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				return err
			}
			names = append(names, name)
		}
		return rows.Err()
	})
	return names, err
}

// query runs fn on the helper's second connection, made on first use. A
// session that has ended (the server's LF003) is an error wrapping ErrLost.
func (s *Session) query(ctx context.Context, fn func(*pgx.Conn) error) error {
	if err := s.l.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ops == nil {
		conn, err := pgx.ConnectConfig(ctx, s.l.config)
		if err != nil {
			return err
		}
		s.ops = conn
	}
	err := fn(s.ops)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "LF003":
		return fmt.Errorf("%w: session %d: %s", ErrLost, s.l.token, pgErr.Message)
	case err != nil && !errors.As(err, &pgErr):
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.ops.Close(closeCtx) //nolint:errcheck // the connection is being dropped
		s.ops = nil
	}
	return fenced(err)
}

// SessionLease is a lease held under a Session: live while the session is.
type SessionLease struct {
	session *Session
	name    string
	token   int64
	names   []string // AcquireAll's, each with its token
	tokens  []int64
	state   json.RawMessage
}

// Names returns the names held: AcquireAll's in their order, or Name().
func (c *SessionLease) Names() []string {
	if c == nil {
		return nil
	}
	return c.grant().allNames()
}

// TokenOf returns the token of name, one of the names held (0 for another).
func (c *SessionLease) TokenOf(name string) int64 {
	if c == nil {
		return 0
	}
	return c.grant().tokenOf(name)
}

// Tokens returns each name's token.
func (c *SessionLease) Tokens() map[string]int64 {
	if c == nil {
		return nil
	}
	return c.grant().tokenMap()
}

// SetValue publishes value for this grant, as Lease.SetValue does; with a
// nil db on the session's connection.
func (c *SessionLease) SetValue(ctx context.Context, db Querier, value interface{}) (bool, error) {
	if c == nil {
		return false, errNoLease
	}
	if ctx == nil {
		return false, errNoContext
	}
	if !isNilQuerier(db) {
		return c.grant().setValue(ctx, db, value)
	}
	args, err := c.grant().valueArgs(value)
	if err != nil {
		return false, err
	}
	var stored bool
	err = c.session.query(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, setValueSQL, args...).Scan(&stored)
	})
	return stored, err
}

// Name is the lease's name.
func (c *SessionLease) Name() string {
	if c == nil {
		return ""
	}
	return c.name
}

// Token is the fencing token of this grant.
func (c *SessionLease) Token() int64 {
	if c == nil {
		return 0
	}
	return c.token
}

// State is what the pool resource's last holder checkpointed (JSON; nil for
// Session.Acquire).
func (c *SessionLease) State() json.RawMessage {
	if c == nil {
		return nil
	}
	return c.state
}

// Err is the session's Err.
func (c *SessionLease) Err() error {
	if c == nil {
		return errNoLease
	}
	return c.session.Err()
}

// Fence fences tx with this grant's token, as Lease.Fence.
func (c *SessionLease) Fence(ctx context.Context, tx pgx.Tx) error {
	if c == nil {
		return errNoLease
	}
	return c.grant().fence(ctx, tx)
}

// Tx runs fn in a transaction fenced with this grant's token, as Lease.Tx.
func (c *SessionLease) Tx(ctx context.Context, db Beginner, fn func(pgx.Tx) error) error {
	if c == nil {
		return errNoLease
	}
	return c.grant().tx(ctx, db, fn)
}

func (c *SessionLease) grant() grant {
	return grant{name: c.name, token: c.token, names: c.names, tokens: c.tokens, lost: c.session.Err}
}

// Checkpoint stores state (marshalled to JSON) as the resource's progress
// under this grant's token: false, and nothing changed, if the token is
// stale. With tx, in that transaction (atomic with the writes there); with a
// nil tx, on the helper's connection.
func (c *SessionLease) Checkpoint(ctx context.Context, tx pgx.Tx, state interface{}) (bool, error) {
	if c == nil {
		return false, errNoLease
	}
	if ctx == nil {
		return false, errNoContext
	}
	data, err := json.Marshal(state)
	if err != nil {
		return false, err
	}
	var stored bool
	if tx != nil {
		err := tx.QueryRow(ctx, checkpointSQL, c.name, c.token, string(data)).Scan(&stored)
		return stored, fenced(err)
	}
	err = c.session.query(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, checkpointSQL, c.name, c.token, string(data)).Scan(&stored)
	})
	return stored, err
}

// Release releases this lease now (the session keeps its others): false if
// it was no longer held.
func (c *SessionLease) Release(ctx context.Context) (bool, error) {
	if c == nil {
		return false, errNoLease
	}
	if ctx == nil {
		return false, errNoContext
	}
	var released bool
	err := c.session.query(ctx, func(conn *pgx.Conn) error {
		if c.names != nil {
			return conn.QueryRow(ctx, releaseAllSQL, c.grant().byBytes()...).Scan(&released)
		}
		return conn.QueryRow(ctx, releaseSQL, c.name, c.token).Scan(&released)
	})
	return released, err
}

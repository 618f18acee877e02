// Package pglease holds a lease of the PostgreSQL extension lease with pgx:
// it acquires the lease on a connection of its own, heartbeats it every TTL/3,
// cancels the returned context before the server could let the lease expire
// when it can no longer keep it, and fences transactions with the lease's
// fencing token. The timing model is that of pg_lease run; see docs/clients.md
// in the lease repository.
package pglease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// MinTTL is the shortest TTL Hold accepts.
const MinTTL = 100 * time.Millisecond

// DefaultTTL is the TTL when Options.TTL is 0.
const DefaultTTL = 20 * time.Second

// The longest Release tries to release the lease.
const maxReleaseWait = 5 * time.Second

const (
	acquireSQL   = "SELECT lease.lease_acquire($1, $2, $3::pg_catalog.interval, $4::pg_catalog.interval)"
	heartbeatSQL = "SELECT lease.lease_heartbeat($1, $2::pg_catalog.int8)"
	releaseSQL   = "SELECT lease.lease_release($1, $2::pg_catalog.int8)"
	// Checks the lease now (LF001 at once for a stale token; no new grant can
	// commit until the transaction ends) and gives fence triggers the token
	// for the rest of the transaction: INSERT, UPDATE and DELETE alike.
	fenceSQL = "SELECT lease.fenced_write($1, $2::pg_catalog.int8), lease.set_fence_token($2::pg_catalog.int8)"
	// Semaphore permits and shared grants (lease 1.3): heartbeat, release and
	// the fence take their tokens as they take a lease's.
	semaphoreAcquireSQL = "SELECT lease.semaphore_acquire($1, $2, $3::pg_catalog.int4, $4::pg_catalog.interval, $5::pg_catalog.interval)"
	sharedAcquireSQL    = "SELECT lease.lease_acquire_shared($1, $2, $3::pg_catalog.interval, $4::pg_catalog.interval)"
	// All or none: the tokens aligned with the names, or NULL holding nothing.
	acquireAllSQL = "SELECT lease.lease_acquire_all($1::pg_catalog.text[], $2, $3::pg_catalog.interval, $4::pg_catalog.interval)"
	// Several names, each with its own token, in the server's order (by
	// bytes): every heartbeat (release) runs; true only if every one was.
	pairsSQL        = " FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.int8[])) AS u(n, t)"
	heartbeatAllSQL = "SELECT pg_catalog.bool_and(lease.lease_heartbeat(n, t))" + pairsSQL
	releaseAllSQL   = "SELECT pg_catalog.bool_and(lease.lease_release(n, t))" + pairsSQL
	// No single token for fence triggers: rows carry their name's token (TokenOf).
	fenceAllSQL = "SELECT pg_catalog.count(lease.fenced_write(n, t))" + pairsSQL
	setValueSQL = "SELECT lease.lease_set_value($1, $2::pg_catalog.int8, $3::pg_catalog.jsonb)"
	leaderSQL   = "SELECT owner, token, value::pg_catalog.text, expires_at FROM lease.leader($1)"
)

// The helpers' messages for bad input, the same in every helper of clients/
// (docs/clients.md, "Bad input"); each is returned before any round trip.
var (
	errNoName        = errors.New("pglease: the lease name must not be empty")
	errNegativeWait  = errors.New("pglease: wait must not be negative")
	errBadGrace      = errors.New("pglease: grace must be between 0 and ttl/2")
	errNoConnection  = errors.New("pglease: no connection given")
	errNoContext     = errors.New("pglease: no context given")
	errNoFunction    = errors.New("pglease: Tx needs a function to run")
	errNoLease       = errors.New("pglease: no lease (a nil *Lease)")
	errBadPermits    = errors.New("pglease: permits must be between 1 and 10000")
	errPermitsShared = errors.New("pglease: permits and shared exclude each other")
	errNoNames       = errors.New("pglease: no lease names given")
	errOneName       = errors.New("pglease: SetValue needs a grant of one name")
	errReleased      = errors.New("pglease: the lease has been released")
)

const shortTTL = "pglease: the ttl must be at least 100 ms"

// ParseConfig parses a libpq connection string, keyword = value pairs
// ("host=/var/run/postgresql dbname=app") or a postgresql:// URI, into the
// config Hold takes (pgx.ParseConfig, with the helpers' message for a
// malformed one). Use it for the application's own connections too.
func ParseConfig(connString string) (*pgx.ConnConfig, error) {
	config, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pglease: malformed connection string: %w", err)
	}
	return config, nil
}

// ErrNotAcquired: another owner held the lease for the whole Options.Wait.
var ErrNotAcquired = errors.New("pglease: lease not acquired: another owner holds it")

// ErrLost: the lease can no longer be trusted. Errors from Lease.Err and
// Lease.Release wrap it with the reason.
var ErrLost = errors.New("pglease: lease lost")

// FencedError is SQLSTATE LF001: the server rejected a write made under a
// stale or expired token. The transaction is aborted; stop working under the
// lease. Fence and Tx return it; IsFenced recognises it and the
// *pgconn.PgError that pgx returns for LF001 from any other call. Its message
// is the server's with its DETAIL (which grant, since when); Detail() is the
// DETAIL alone.
type FencedError struct {
	PgErr *pgconn.PgError
}

func (e *FencedError) Error() string {
	if e.PgErr.Detail != "" {
		return "pglease: fenced off: " + e.PgErr.Message + "\nDETAIL: " + e.PgErr.Detail
	}
	return "pglease: fenced off: " + e.PgErr.Message
}

// Detail is the server's DETAIL.
func (e *FencedError) Detail() string { return e.PgErr.Detail }

func (e *FencedError) Unwrap() error { return e.PgErr }

// IsFenced reports whether err is, or wraps, an LF001 error.
func IsFenced(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "LF001"
}

// fenced turns an LF001 error into a *FencedError; other errors pass.
func fenced(err error) error {
	var pgErr *pgconn.PgError
	var already *FencedError
	if errors.As(err, &pgErr) && pgErr.Code == "LF001" && !errors.As(err, &already) {
		return &FencedError{PgErr: pgErr}
	}
	return err
}

// Options of Hold. Zero values mean the defaults.
type Options struct {
	Owner string        // default host:pid:random; must be unique among running holders
	TTL   time.Duration // default 20s, at least 100ms
	Wait  time.Duration // how long to wait in the server's queue while another owner holds it; 0: one try
	// Time the application has to stop between the loss signal and the
	// earliest moment the server could let the lease expire (minus TTL/10).
	// Default TTL/5, at most TTL/2.
	Grace time.Duration
	// Permits > 0 holds one of that many permits (1 to 10000) of semaphore
	// name (lease.semaphore_acquire) instead of the lease.
	Permits int
	// Shared holds the lease in shared mode beside other shared holders
	// (lease.lease_acquire_shared). Not with Permits.
	Shared bool
}

func checkKind(permits int, shared bool) error {
	if permits < 0 || permits > 10000 {
		return errBadPermits
	}
	if permits > 0 && shared {
		return errPermitsShared
	}
	return nil
}

func checkNames(names []string) error {
	if len(names) == 0 {
		return errNoNames
	}
	for _, name := range names {
		if name == "" {
			return errNoName
		}
	}
	return nil
}

// Lease is a held lease. Its methods are safe for concurrent use.
type Lease struct {
	name     string
	owner    string
	token    int64
	ttl      time.Duration
	interval time.Duration // between heartbeats
	trust    time.Duration // how long after the last successful send the lease is trusted
	retry    time.Duration
	config   *pgx.ConnConfig
	conn     *pgx.Conn // the helper's own connection; used under callMu
	callMu   sync.Mutex

	names   []string // HoldAll's, in their order; nil for one name
	tokens  []int64  // aligned with names
	permits int
	shared  bool

	// When the last acquire or heartbeat that succeeded was sent (monotonic):
	// the server read its clock after that, so the lease expires no sooner
	// than TTL later (docs/cli.md, "How run keeps the command inside the lease").
	lastSuccess time.Time

	cancel     context.CancelFunc // of the context Hold returned
	stopCalls  context.CancelFunc // aborts an in-flight heartbeat on Release
	stopped    chan struct{}      // closed by Release
	done       chan struct{}      // closed when the heartbeat goroutine has ended
	mu         sync.Mutex
	err        error // ErrLost with the reason, once lost
	releaseMu  sync.Mutex
	released   bool
	releaseErr error

	session bool // a Session's: token is the session id; keepalive and close instead of heartbeat and release
}

// Hold acquires lease name and keeps it until Release. The returned context
// is derived from ctx and is cancelled when the lease is lost (Err says why)
// or released: do the lease's work under it. The helper heartbeats on its own
// connection, made from config (which must come from pgx.ParseConfig). ctx
// also bounds the acquire. Errors: ErrNotAcquired, a connection error when
// the server could not be reached for the whole Wait, or the server's error.
func Hold(ctx context.Context, config *pgx.ConnConfig, name string, opts Options) (*Lease, context.Context, error) {
	l, err := newLease(ctx, config, name, opts)
	if err != nil {
		return nil, nil, err
	}
	if err := checkKind(opts.Permits, opts.Shared); err != nil {
		return nil, nil, err
	}
	l.permits, l.shared = opts.Permits, opts.Shared
	if err := l.acquire(ctx, opts.Wait); err != nil {
		l.disconnect()
		return nil, nil, err
	}
	return l, l.start(ctx), nil
}

// newLease checks Hold's arguments (before any round trip) and makes the
// Lease, not yet acquired.
// HoldAll acquires every lease of names or none (lease.lease_acquire_all),
// waiting up to opts.Wait (then ErrNotAcquired, holding nothing), and keeps
// them all as Hold keeps one: one heartbeat statement renews every name, and
// the loss of any is the loss of the whole. TokenOf and Tokens give each
// name's token; Tx and Fence check every name with its own token. Token()
// is 0: there is no single token. opts.Permits and opts.Shared must be unset.
func HoldAll(ctx context.Context, config *pgx.ConnConfig, names []string, opts Options) (*Lease, context.Context, error) {
	if err := checkNames(names); err != nil {
		return nil, nil, err
	}
	if opts.Permits != 0 || opts.Shared {
		return nil, nil, errors.New("pglease: HoldAll takes no Permits or Shared")
	}
	l, err := newLease(ctx, config, strings.Join(names, ", "), opts)
	if err != nil {
		return nil, nil, err
	}
	l.names = append([]string(nil), names...)
	if err := l.acquire(ctx, opts.Wait); err != nil {
		l.disconnect()
		return nil, nil, err
	}
	return l, l.start(ctx), nil
}

func newLease(ctx context.Context, config *pgx.ConnConfig, name string, opts Options) (*Lease, error) {
	if ctx == nil {
		return nil, errNoContext
	}
	if config == nil {
		return nil, errNoConnection
	}
	if name == "" {
		return nil, errNoName
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < MinTTL {
		return nil, fmt.Errorf("%s, not %v", shortTTL, ttl)
	}
	if opts.Wait < 0 {
		return nil, errNegativeWait
	}
	grace := opts.Grace
	if grace == 0 {
		grace = ttl / 5
	}
	if grace < 0 || grace > ttl/2 {
		return nil, errBadGrace
	}
	owner := opts.Owner
	if owner == "" {
		owner = defaultOwner()
	}
	ownConfig := config.Copy()
	// No prepared statements, named or unnamed across round trips: they break
	// transaction-mode poolers.
	ownConfig.PreferSimpleProtocol = true
	return &Lease{
		name:     name,
		owner:    owner,
		ttl:      ttl,
		interval: ttl / 3,
		trust:    ttl - ttl/10 - grace,
		retry:    clamp(ttl/20, 50*time.Millisecond, time.Second),
		config:   ownConfig,
		stopped:  make(chan struct{}),
		done:     make(chan struct{}),
	}, nil
}

// start begins the heartbeats and returns the lease's context.
func (l *Lease) start(ctx context.Context) context.Context {
	leaseCtx, cancel := context.WithCancel(ctx)
	l.cancel = cancel
	callCtx, stopCalls := context.WithCancel(context.Background())
	l.stopCalls = stopCalls
	go l.keep(callCtx)
	return leaseCtx
}

// Name is the lease's name.
func (l *Lease) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

// Owner is the owner name the lease was acquired under.
func (l *Lease) Owner() string {
	if l == nil {
		return ""
	}
	return l.owner
}

// Token is the fencing token of this grant.
func (l *Lease) Token() int64 {
	if l == nil {
		return 0
	}
	return l.token
}

// Err is nil while the lease is held, and an error wrapping ErrLost, with the
// reason, once it is lost.
func (l *Lease) Err() error {
	if l == nil {
		return errNoLease
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Fence fences tx with the lease's token: it checks the lease at once (a
// *FencedError if the token is stale or the lease expired), holds off any new
// grant of the lease until tx ends, and sets lease.fence_token for the rest of
// tx, so fence triggers accept its INSERTs, UPDATEs and DELETEs.
func (l *Lease) Fence(ctx context.Context, tx pgx.Tx) error {
	if l == nil {
		return errNoLease
	}
	return l.grant().fence(ctx, tx)
}

// Beginner is what Tx needs: *pgx.Conn, *pgxpool.Pool and pgx.Tx have it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Tx runs fn in a transaction fenced with Fence, and commits it if fn returns
// nil (else rolls back). An LF001 from the fence, fn or the commit is
// returned as a *FencedError.
//
// ctx may be the context Hold returned. Once the lease is lost (that context
// cancelled), Tx still asks the server, so that a lease that was taken over
// gives the *FencedError; if the fence passes (the server has not let the
// lease go yet), it returns Err() without running fn. The statements Tx sends
// itself do not end with ctx once the lease is lost, and the rollback never
// does: pgx closes a connection whose context ends during a call, and the
// connection is the caller's.
func (l *Lease) Tx(ctx context.Context, db Beginner, fn func(pgx.Tx) error) error {
	if l == nil {
		return errNoLease
	}
	return l.grant().tx(ctx, db, fn)
}

func (l *Lease) grant() grant {
	return grant{name: l.name, token: l.token, names: l.names, tokens: l.tokens, lost: l.Err}
}

// Names returns the names held: HoldAll's in their order, or Name().
func (l *Lease) Names() []string {
	if l == nil {
		return nil
	}
	return l.grant().allNames()
}

// TokenOf returns the token of name, one of the names held (0 for another).
func (l *Lease) TokenOf(name string) int64 {
	if l == nil {
		return 0
	}
	return l.grant().tokenOf(name)
}

// Tokens returns each name's token.
func (l *Lease) Tokens() map[string]int64 {
	if l == nil {
		return nil
	}
	return l.grant().tokenMap()
}

// SetValue publishes value (marshalled to JSON: an address, a role) for this
// grant (lease.lease_set_value), for Leader and the value_set event: false,
// and nothing changed, if its token is no longer live. It runs on db (in your
// transaction if db is a pgx.Tx), or on the helper's own connection when db
// is nil. Only for a grant of one name.
func (l *Lease) SetValue(ctx context.Context, db Querier, value interface{}) (bool, error) {
	if l == nil {
		return false, errNoLease
	}
	if ctx == nil {
		return false, errNoContext
	}
	if !isNilQuerier(db) {
		return l.grant().setValue(ctx, db, value)
	}
	g := l.grant()
	data, err := g.valueArgs(value)
	if err != nil {
		return false, err
	}
	l.releaseMu.Lock()
	released := l.released
	l.releaseMu.Unlock()
	if released {
		return false, errReleased
	}
	var stored bool
	err = l.call(ctx, time.Now().Add(l.interval), setValueSQL, data, &stored)
	return stored, err
}

// grant is what fencing needs: a lease's name and token (or HoldAll's names
// and tokens), and whether the helper has lost it (a Lease, or a lease held
// under a Session).
type grant struct {
	name   string
	token  int64
	names  []string // several names, each with its own token
	tokens []int64
	lost   func() error
}

func (g grant) allNames() []string {
	if g.names != nil {
		return append([]string(nil), g.names...)
	}
	return []string{g.name}
}

func (g grant) tokenOf(name string) int64 {
	if g.names == nil {
		if name == g.name {
			return g.token
		}
		return 0
	}
	for i, n := range g.names {
		if n == name && i < len(g.tokens) {
			return g.tokens[i]
		}
	}
	return 0
}

func (g grant) tokenMap() map[string]int64 {
	tokens := map[string]int64{}
	for _, name := range g.allNames() {
		tokens[name] = g.tokenOf(name)
	}
	return tokens
}

// byBytes returns the names and their tokens in the server's order.
func (g grant) byBytes() []interface{} {
	names := g.allNames()
	sort.Strings(names)
	tokens := make([]int64, len(names))
	for i, name := range names {
		tokens[i] = g.tokenOf(name)
	}
	return []interface{}{names, tokens}
}

func (g grant) fence(ctx context.Context, tx pgx.Tx) error {
	if ctx == nil {
		return errNoContext
	}
	if tx == nil {
		return errNoConnection
	}
	if g.names != nil {
		_, err := tx.Exec(ctx, fenceAllSQL, g.byBytes()...)
		return fenced(err)
	}
	_, err := tx.Exec(ctx, fenceSQL, g.name, g.token)
	return fenced(err)
}

func (g grant) valueArgs(value interface{}) ([]interface{}, error) {
	if g.names != nil {
		return nil, errOneName
	}
	data, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	return []interface{}{g.name, g.token, string(data)}, nil
}

func (g grant) setValue(ctx context.Context, db Querier, value interface{}) (bool, error) {
	args, err := g.valueArgs(value)
	if err != nil {
		return false, err
	}
	var stored bool
	err = db.QueryRow(ctx, setValueSQL, args...).Scan(&stored)
	return stored, fenced(err)
}

// Querier is what SetValue and Leader run on: a *pgx.Conn, a pgx.Tx or a
// *pgxpool.Pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...interface{}) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...interface{}) pgx.Row
}

func isNilQuerier(db Querier) bool {
	if db == nil {
		return true
	}
	v := reflect.ValueOf(db)
	return v.Kind() == reflect.Ptr && v.IsNil()
}

// Holder is one live holder of a name, from Leader: the exclusive holder, or
// one holder of a semaphore permit or shared grant.
type Holder struct {
	Owner     string
	Token     int64
	Value     json.RawMessage // what it published (SetValue); nil before
	ExpiresAt time.Time
}

// Leader returns who holds name now and what each published (lease.leader):
// one Holder for an exclusive lease, one per holder of a semaphore or shared
// lease, none when nobody holds it.
func Leader(ctx context.Context, db Querier, name string) ([]Holder, error) {
	switch {
	case ctx == nil:
		return nil, errNoContext
	case isNilQuerier(db):
		return nil, errNoConnection
	case name == "":
		return nil, errNoName
	}
	rows, err := db.Query(ctx, leaderSQL, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var holders []Holder
	for rows.Next() {
		var h Holder
		var value *string
		if err := rows.Scan(&h.Owner, &h.Token, &value, &h.ExpiresAt); err != nil {
			return nil, err
		}
		if value != nil {
			h.Value = json.RawMessage(*value)
		}
		holders = append(holders, h)
	}
	return holders, rows.Err()
}

func (g grant) tx(ctx context.Context, db Beginner, fn func(pgx.Tx) error) (err error) {
	switch {
	case ctx == nil:
		return errNoContext
	case isNil(db):
		return errNoConnection
	case fn == nil:
		return errNoFunction
	}
	lost := g.lost()
	if lost == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	own := ctx
	if lost != nil {
		own = detached{ctx}
	}
	tx, err := db.Begin(own)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Bounded, and never by ctx: a rollback that fails makes pgx close the connection.
			rollbackCtx, cancel := context.WithTimeout(detached{ctx}, maxReleaseWait)
			defer cancel()
			tx.Rollback(rollbackCtx) //nolint:errcheck // the error that matters is err
		}
	}()
	if err := g.fence(own, tx); err != nil {
		return err
	}
	if lost != nil {
		return lost
	}
	if err := fn(tx); err != nil {
		return fenced(err)
	}
	// The fence passed: no new grant can commit before this transaction ends,
	// so the commit is safe even if the loss is signalled meanwhile.
	return fenced(tx.Commit(detached{ctx}))
}

// detached carries a context's values but not its cancellation or deadline
// (context.WithoutCancel, before Go 1.21).
type detached struct{ parent context.Context }

func (detached) Deadline() (time.Time, bool)         { return time.Time{}, false }
func (detached) Done() <-chan struct{}               { return nil }
func (detached) Err() error                          { return nil }
func (d detached) Value(key interface{}) interface{} { return d.parent.Value(key) }

// isNil reports whether db is nil, or a nil pointer in an interface.
func isNil(db Beginner) bool {
	if db == nil {
		return true
	}
	v := reflect.ValueOf(db)
	return v.Kind() == reflect.Ptr && v.IsNil()
}

// Release stops the heartbeats and releases the lease (trying for at most 5
// s, and never past the moment the lease could expire anyway), and cancels
// the context Hold returned. It returns Err() if the lease had been lost, an
// error wrapping ErrLost if the server no longer had it, or the error of the
// release call. Calling it again returns the same.
func (l *Lease) Release() error {
	if l == nil {
		return errNoLease
	}
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	if l.released {
		return l.releaseErr
	}
	l.released = true
	close(l.stopped)
	l.stopCalls()
	<-l.done
	defer l.cancel()
	defer l.disconnect()
	if err := l.Err(); err != nil {
		l.releaseErr = err
		return err
	}
	deadline := time.Now().Add(maxReleaseWait)
	if expires := l.lastSuccess.Add(l.ttl); expires.Before(deadline) {
		deadline = expires
	}
	if l.session {
		var count int32
		if err := l.call(context.Background(), deadline, sessionCloseSQL, []interface{}{l.token}, &count); err != nil {
			l.releaseErr = fmt.Errorf("pglease: could not close session %d (it expires on its own): %w", l.token, err)
		}
		return l.releaseErr
	}
	var released bool
	releaseQuery, releaseArgs := releaseSQL, []interface{}{l.name, l.token}
	if l.names != nil {
		releaseQuery, releaseArgs = releaseAllSQL, l.grant().byBytes()
	}
	if err := l.call(context.Background(), deadline, releaseQuery, releaseArgs, &released); err != nil {
		l.releaseErr = fmt.Errorf("pglease: could not release lease %q (it expires on its own): %w", l.name, err)
	} else if !released {
		l.releaseErr = fmt.Errorf("%w: lease %q was no longer held when released", ErrLost, l.name)
	}
	return l.releaseErr
}

func (l *Lease) acquire(ctx context.Context, wait time.Duration) error {
	giveUpAt := time.Now().Add(wait)
	poll := clamp(l.ttl/10, 50*time.Millisecond, time.Second)
	ttl := fmt.Sprintf("%d milliseconds", l.ttl.Milliseconds())
	for {
		sent := time.Now()
		// The server queues waiters (first come, first served) and wakes the
		// first when the lease frees up. Each call waits at most half the trust
		// window: a grant later than the whole window could not be trusted at
		// all, since the lease's TTL may have started when the call was sent.
		wait := clamp(giveUpAt.Sub(sent), 0, l.trust/2)
		waitText := fmt.Sprintf("%d microseconds", wait.Microseconds())
		var token *int64 // NULL when another owner holds the lease
		var tokens []int64
		var err error
		switch {
		case l.names != nil:
			err = l.call(ctx, sent.Add(l.trust), acquireAllSQL, []interface{}{l.names, l.owner, ttl, waitText}, &tokens)
			if err == nil && tokens != nil {
				token = &tokens[0]
			}
		case l.permits > 0:
			err = l.call(ctx, sent.Add(l.trust), semaphoreAcquireSQL, []interface{}{l.name, l.owner, l.permits, ttl, waitText}, &token)
		case l.shared:
			err = l.call(ctx, sent.Add(l.trust), sharedAcquireSQL, []interface{}{l.name, l.owner, ttl, waitText}, &token)
		default:
			err = l.call(ctx, sent.Add(l.trust), acquireSQL, []interface{}{l.name, l.owner, ttl, waitText}, &token)
		}
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil && token != nil:
			l.token = *token
			if l.names != nil {
				l.tokens, l.token = tokens, 0
			}
			l.lastSuccess = sent
			return nil
		}
		now := time.Now()
		if !now.Before(giveUpAt) {
			if err != nil {
				return fmt.Errorf("pglease: could not acquire lease %q: %w", l.name, err)
			}
			return ErrNotAcquired
		}
		if !now.Before(sent.Add(wait)) {
			continue // the server waited: ask again at once
		}
		// Refused early, or failed: do not spin.
		timer := time.NewTimer(minDuration(poll, giveUpAt.Sub(now)))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
	}
}

// keep heartbeats until Release or the loss of the lease.
func (l *Lease) keep(callCtx context.Context) {
	defer close(l.done)
	next := l.lastSuccess.Add(l.interval)
	for {
		now := time.Now()
		trustEnds := l.lastSuccess.Add(l.trust)
		if !now.Before(trustEnds) {
			l.lose(fmt.Sprintf("no heartbeat succeeded for %v", now.Sub(l.lastSuccess).Round(time.Millisecond)))
			return
		}
		if now.Before(next) {
			timer := time.NewTimer(minTime(next, trustEnds).Sub(now))
			select {
			case <-timer.C:
				continue
			case <-l.stopped:
				timer.Stop()
				return
			}
		}
		var renewed bool
		renewSQL, renewArgs := heartbeatSQL, []interface{}{l.name, l.token}
		if l.names != nil {
			renewSQL, renewArgs = heartbeatAllSQL, l.grant().byBytes()
		}
		if l.session {
			renewSQL, renewArgs = sessionKeepaliveSQL, []interface{}{l.token}
		}
		err := l.call(callCtx, minTime(trustEnds, now.Add(l.interval)), renewSQL, renewArgs, &renewed)
		select {
		case <-l.stopped:
			return
		default:
		}
		switch {
		case err != nil:
			next = time.Now().Add(l.retry)
		case !renewed:
			l.lose("the heartbeat was refused (the lease was revoked, expired or taken over)")
			return
		default:
			l.lastSuccess = now
			next = now.Add(l.interval)
		}
	}
}

func (l *Lease) lose(reason string) {
	l.mu.Lock()
	l.err = fmt.Errorf("%w: lease %q: %s", ErrLost, l.name, reason)
	l.mu.Unlock()
	l.cancel()
}

// call runs one statement on the helper's own connection and scans its one
// value into dest. A call with no answer by deadline is abandoned, and with
// it the connection (pgx closes a connection whose context ends mid-call).
func (l *Lease) call(ctx context.Context, deadline time.Time, sql string, args []interface{}, dest interface{}) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	l.callMu.Lock()
	defer l.callMu.Unlock()
	if l.conn == nil {
		conn, err := pgx.ConnectConfig(ctx, l.config)
		if err != nil {
			return err
		}
		l.conn = conn
	}
	err := l.conn.QueryRow(ctx, sql, args...).Scan(dest)
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) {
		l.disconnect()
	}
	return err
}

func (l *Lease) disconnect() {
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l.conn.Close(ctx) //nolint:errcheck // the connection is being dropped
		l.conn = nil
	}
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	random := make([]byte, 4)
	if _, err := rand.Read(random); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(random))
}

func clamp(d, low, high time.Duration) time.Duration {
	if d < low {
		return low
	}
	if d > high {
		return high
	}
	return d
}

func minDuration(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

package pglease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// Watching events (docs/reference.md, "Resuming a watch"): every event has a
// position (xid, ordinal) in lease.history; the horizon says up to which
// transaction every event has arrived.
const (
	listenSQL  = "SELECT lease.listen_events()"
	horizonSQL = "SELECT lease.events_horizon($1::pg_catalog.bool)::pg_catalog.text"
	// From a position, or (with a time and no position yet) from a time on.
	eventsAfterSQL = "SELECT xid::pg_catalog.text, ordinal, event, name, token, owner, session FROM lease.history " +
		"WHERE CASE WHEN $1::pg_catalog.timestamptz IS NULL " +
		"           THEN (xid, ordinal) > ($2::pg_catalog.xid8, $3::pg_catalog.int8) " +
		"           ELSE at >= $1::pg_catalog.timestamptz END " +
		"ORDER BY history.xid, history.ordinal"
)

// While events wait for their horizon, how often to ask for it; while nothing
// happens, how often to ask anyway (a partitioned connection shows itself by
// not answering), and how long an answer may take: for TCP itself
// (TCP_USER_TIMEOUT, unless the connection string sets tcp_user_timeout), and
// for every call but the first horizon, which waits for the transactions in
// progress (a stalled server or relay that still acknowledges the bytes).
const (
	horizonInterval = 50 * time.Millisecond
	probeInterval   = 5 * time.Second
	answerTimeout   = 10 * time.Second
)

var (
	errBadSince     = errors.New("pglease: since must be a position XID/N (an event's position)")
	errSinceTwice   = errors.New("pglease: Since and SinceTime exclude each other")
	errBadReconnect = errors.New("pglease: the reconnect interval must not be negative")
	positionPattern = regexp.MustCompile(`^([0-9]+)/([0-9]+)$`)
)

// Event is a lease event (docs/concepts.md, "Events and history"). Fields an
// event does not have are zero: Name, Token and Owner of session_closed,
// Session of an event outside a session.
type Event struct {
	Event   string
	Name    string
	Token   int64
	Owner   string
	Session int64
	// Position is "XID/N", to resume from (WatchOptions.Since); empty for an
	// event not recorded in lease.history (lease.record_history = off).
	Position string
	// Value is what an acquired or value_set event published, as JSON; not
	// kept in history, so nil when replayed.
	Value json.RawMessage
	// Replayed: read from lease.history rather than received live.
	Replayed bool
}

// WatchOptions: where Watch starts, and how soon it reconnects.
type WatchOptions struct {
	// Since resumes after a position (Event.Position of an event seen earlier).
	Since string
	// SinceTime starts with the events recorded from this time on.
	// Without either, Watch starts with the transactions in progress when it
	// first connects.
	SinceTime time.Time
	// ReconnectInterval is the pause before connecting again after the
	// connection was lost; default 1 s.
	ReconnectInterval time.Duration
}

// Watcher is a running Watch.
type Watcher struct {
	events chan Event
	err    error
}

// Events delivers every lease event, in the order of their positions in
// lease.history, each once. It is closed when the watch ends: Err says why.
func (w *Watcher) Events() <-chan Event {
	return w.events
}

// Err is, once Events is closed, why the watch ended: ctx's error, or an
// error of the server that connecting again would not mend (a lease older
// than 1.4, say).
func (w *Watcher) Err() error {
	return w.err
}

// Watch watches lease events until ctx is done. A lost or silent connection
// is replaced, and what happened meanwhile is replayed from lease.history;
// each loss is logged (package log). Needs lease 1.4 and
// lease.record_history (events without a position come as they arrive). A
// malformed Since is an error before anything connects.
func Watch(ctx context.Context, config *pgx.ConnConfig, opts WatchOptions) (*Watcher, error) {
	if ctx == nil {
		return nil, errNoContext
	}
	if config == nil {
		return nil, errNoConnection
	}
	w := &watchState{retry: opts.ReconnectInterval}
	if opts.Since != "" {
		if !opts.SinceTime.IsZero() {
			return nil, errSinceTwice
		}
		resume, ok := parsePosition(opts.Since)
		if !ok {
			return nil, fmt.Errorf("%w, not %q", errBadSince, opts.Since)
		}
		w.resume = &resume
	} else if !opts.SinceTime.IsZero() {
		since := opts.SinceTime
		w.sinceTime = &since
	}
	if w.retry < 0 {
		return nil, errBadReconnect
	}
	if w.retry == 0 {
		w.retry = time.Second
	}
	w.config = config.Copy()
	w.config.PreferSimpleProtocol = true
	withUserTimeout(w.config)
	watcher := &Watcher{events: make(chan Event)}
	w.out = watcher.events
	go func() {
		watcher.err = w.run(ctx)
		close(watcher.events)
	}()
	return watcher, nil
}

// position is an event's place in lease.history: (xid, ordinal).
type position struct {
	xid     uint64
	ordinal int64
}

func (p position) less(q position) bool {
	return p.xid < q.xid || (p.xid == q.xid && p.ordinal < q.ordinal)
}

func parsePosition(text string) (position, bool) {
	match := positionPattern.FindStringSubmatch(text)
	if match == nil {
		return position{}, false
	}
	xid, err1 := strconv.ParseUint(match[1], 10, 64)
	ordinal, err2 := strconv.ParseInt(match[2], 10, 64)
	return position{xid, ordinal}, err1 == nil && err2 == nil
}

type watchState struct {
	config *pgx.ConnConfig
	retry  time.Duration
	out    chan<- Event
	// resume: everything up to it has been sent (nil: not known yet).
	resume    *position
	sinceTime *time.Time
}

// run watches until ctx is done or an error that a new connection would not
// mend, and returns that error.
func (w *watchState) run(ctx context.Context) error {
	for {
		err := w.watchConnection(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var pgErr *pgconn.PgError
		var bad *badNotification
		if errors.As(err, &bad) ||
			(errors.As(err, &pgErr) && pgErr.Severity != "FATAL" && !strings.HasPrefix(pgErr.Code, "08")) {
			return err
		}
		log.Printf("pglease: watch: connection lost (%v); reconnecting", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.retry):
		}
	}
}

// badNotification: a notification on the watched channels that is not what
// lease sends.
type badNotification struct{ payload string }

func (e *badNotification) Error() string {
	return fmt.Sprintf("pglease: watch: a notification that is no event: %q", e.payload)
}

// watchConnection watches on one connection until it breaks (or ctx is done).
func (w *watchState) watchConnection(ctx context.Context) error {
	connectCtx, cancel := context.WithTimeout(ctx, answerTimeout)
	conn, err := pgx.ConnectConfig(connectCtx, w.config)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(closeCtx) //nolint:errcheck // the connection is being dropped
	}()
	pending := map[position]Event{}
	pend := func(key position, event Event) {
		if w.resume != nil && !w.resume.less(key) {
			return // sent already
		}
		if _, ok := pending[key]; !ok {
			pending[key] = event
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, answerTimeout)
	_, err = conn.Exec(callCtx, listenSQL)
	cancel()
	if err != nil {
		return err
	}
	// Writers that looked for a watcher before this one listened sent
	// nothing: wait for them, so that the replay has their events.
	var text string
	if err := conn.QueryRow(ctx, horizonSQL, true).Scan(&text); err != nil {
		return err
	}
	horizon, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return err
	}
	if w.resume == nil && w.sinceTime == nil {
		w.resume = &position{horizon, 0}
	}
	var since interface{}
	after := position{}
	if w.resume != nil {
		after = *w.resume
	} else {
		since = *w.sinceTime
	}
	callCtx, cancel = context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	rows, err := conn.Query(callCtx, eventsAfterSQL, since, strconv.FormatUint(after.xid, 10), after.ordinal)
	if err != nil {
		return err
	}
	for rows.Next() {
		var xid string
		var ordinal int64
		var event Event
		var name, owner *string
		var token, session *int64
		if err := rows.Scan(&xid, &ordinal, &event.Event, &name, &token, &owner, &session); err != nil {
			rows.Close()
			return err
		}
		event.Name, event.Owner, event.Token, event.Session = deref(name), deref(owner), deref(token), deref(session)
		event.Position = xid + "/" + strconv.FormatInt(ordinal, 10)
		event.Replayed = true
		key, _ := parsePosition(event.Position)
		pend(key, event)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// The horizon call above notifies this connection at its commit.
	requested := true
	lastCall := time.Now()
	channel := fmt.Sprintf("lease_horizon_%d", conn.PgConn().PID())
	for {
		interval := probeInterval
		if len(pending) > 0 && !requested {
			interval = horizonInterval
		}
		waitCtx, cancel := context.WithDeadline(ctx, lastCall.Add(interval))
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		if n != nil {
			if n.Channel == channel {
				requested = false
				xid, err := strconv.ParseUint(n.Payload, 10, 64)
				if err != nil {
					return &badNotification{n.Payload}
				}
				passed := position{xid, 0}
				if err := w.send(ctx, pending, passed); err != nil {
					return err
				}
				if w.resume == nil || w.resume.less(passed) {
					w.resume = &passed
				}
			} else if err := w.received(ctx, n, pend); err != nil {
				return err
			}
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Anything but the end of the wait (pgconn keeps the connection then).
		if waitCtx.Err() == nil || conn.IsClosed() {
			return err
		}
		callCtx, cancel := context.WithTimeout(ctx, answerTimeout)
		_, err = conn.Exec(callCtx, horizonSQL, false)
		cancel()
		if err != nil {
			return err
		}
		requested = true
		lastCall = time.Now()
	}
}

// send sends the pending events before passed, in position order.
func (w *watchState) send(ctx context.Context, pending map[position]Event, passed position) error {
	keys := make([]position, 0, len(pending))
	for key := range pending {
		if key.less(passed) {
			keys = append(keys, key)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].less(keys[j]) })
	for _, key := range keys {
		select {
		case w.out <- pending[key]:
			delete(pending, key)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// received takes a notification on lease_events: pending until its horizon,
// or sent at once if it has no position.
func (w *watchState) received(ctx context.Context, n *pgconn.Notification, pend func(position, Event)) error {
	var fields struct {
		Event    string          `json:"event"`
		Name     *string         `json:"name"`
		Token    *int64          `json:"token"`
		Owner    *string         `json:"owner"`
		Session  *int64          `json:"session"`
		Position *string         `json:"position"`
		Value    json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal([]byte(n.Payload), &fields); err != nil {
		return &badNotification{n.Payload}
	}
	event := Event{Event: fields.Event, Name: deref(fields.Name), Token: deref(fields.Token), Owner: deref(fields.Owner),
		Session: deref(fields.Session), Position: deref(fields.Position)}
	if string(fields.Value) != "null" {
		event.Value = fields.Value
	}
	if key, ok := parsePosition(event.Position); ok {
		pend(key, event)
		return nil
	}
	// Not recorded in history: as it comes.
	select {
	case w.out <- event:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

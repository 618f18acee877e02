// Tests of the Go helper's semaphores, shared leases, all-or-none grants and
// leader values (lease 1.3); part of the program in main.go.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v4"

	"pglease"
)

func leaderCount(name string) int {
	var n int
	if err := admin(`SELECT count(*) FROM lease.leader($1)`, []interface{}{name}, &n); err != nil {
		panic(err)
	}
	return n
}

func waitForWaiter(name, mode string) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := admin(`SELECT count(*) FROM lease.waiters WHERE name = $1 AND mode = $2`, []interface{}{name, mode}, &n); err == nil && n > 0 {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

type holdResult struct {
	token int64
	err   error
}

// holdInBackground holds (and releases at once) in a goroutine of its own.
func holdInBackground(name string, opts pglease.Options) chan holdResult {
	result := make(chan holdResult, 1)
	go func() {
		lease, _, err := pglease.Hold(bg, config(), name, opts)
		if err != nil {
			result <- holdResult{err: err}
			return
		}
		result <- holdResult{token: lease.Token(), err: lease.Release()}
	}()
	return result
}

func testSemaphore() {
	name := prefix + "semaphore"
	opts := pglease.Options{TTL: 5 * time.Second, Permits: 2}
	a, _, errA := pglease.Hold(bg, config(), name, opts)
	b, _, errB := pglease.Hold(bg, config(), name, opts)
	if errA != nil || errB != nil {
		report(false, "semaphore: two holders of 2 permits", errA, errB)
		return
	}
	defer a.Release()
	holders := leaderCount(name)
	third := opts
	third.Wait = 300 * time.Millisecond
	_, _, err := pglease.Hold(bg, config(), name, third)
	report(a.Token() != b.Token() && holders == 2 && errors.Is(err, pglease.ErrNotAcquired),
		"semaphore: two holders of 2 permits, each with its own token; a third is not acquired after waiting 0.3 s",
		a.Token(), b.Token(), holders, err)
	third.Wait = 10 * time.Second
	result := holdInBackground(name, third)
	queued := waitForWaiter(name, "semaphore")
	b.Release()
	var got holdResult
	select {
	case got = <-result:
	case <-time.After(10 * time.Second):
		got.err = errors.New("no answer")
	}
	report(queued && got.err == nil && got.token > b.Token(),
		"semaphore: a third holder waits in the server's queue and gets the permit the second gives back", queued, got)
}

func testSemaphoreRevoked() {
	name := prefix + "semaphore-revoked"
	permit, ctx, err := pglease.Hold(bg, config(), name, pglease.Options{TTL: 2 * time.Second, Permits: 3})
	if err != nil {
		report(false, "semaphore: hold a permit", err)
		return
	}
	defer permit.Release()
	conn := connect(conninfo)
	defer conn.Close(bg)
	write := func(note string) error {
		return permit.Tx(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO client_log VALUES ($1, $2)`, name, note)
			return err
		})
	}
	first := write("under the permit")
	admin(`SELECT lease.lease_revoke($1)`, []interface{}{name}, new(int64)) //nolint:errcheck
	select {
	case <-ctx.Done():
	case <-time.After(3 * time.Second):
	}
	report(first == nil && errors.Is(permit.Err(), pglease.ErrLost),
		"semaphore: a revoked permit is signalled as a loss (the context is cancelled)", first, permit.Err())
	err = write("after the revoke")
	var fencedErr *pglease.FencedError
	var written int
	admin(`SELECT count(*) FROM client_log WHERE lease_name = $1`, []interface{}{name}, &written) //nolint:errcheck
	report(errors.As(err, &fencedErr) && fencedErr.Detail() != "" && written == 1 && !conn.IsClosed(),
		"semaphore: the revoked permit's next Tx returns the *FencedError (with DETAIL), nothing written, the connection open", err, written)
}

func testShared() {
	name := prefix + "shared"
	opts := pglease.Options{TTL: 5 * time.Second, Shared: true}
	r1, _, err1 := pglease.Hold(bg, config(), name, opts)
	r2, _, err2 := pglease.Hold(bg, config(), name, opts)
	if err1 != nil || err2 != nil {
		report(false, "shared: two shared holders", err1, err2)
		return
	}
	together := leaderCount(name)
	result := holdInBackground(name, pglease.Options{TTL: 5 * time.Second, Wait: 10 * time.Second})
	queued := waitForWaiter(name, "exclusive")
	time.Sleep(200 * time.Millisecond)
	var early bool
	select {
	case <-result:
		early = true
	default:
	}
	still := leaderCount(name)
	report(together == 2 && r1.Token() != r2.Token() && queued && !early && still == 2,
		"shared: two shared holders together, each with its own token, while an exclusive request waits", together, still, queued, early)
	r1.Release()
	r2.Release()
	var got holdResult
	select {
	case got = <-result:
	case <-time.After(10 * time.Second):
		got.err = errors.New("no answer")
	}
	report(got.err == nil && got.token > 0, "shared: the exclusive request is granted once both shared holders have released", got)
}

func testAcquireAll() {
	a, b, c := prefix+"acct:b", prefix+"acct:a", prefix+"acct:c"
	both, ctx, err := pglease.HoldAll(bg, config(), []string{a, b}, pglease.Options{TTL: 2 * time.Second})
	if err != nil {
		report(false, "acquire all", err)
		return
	}
	defer both.Release()
	var server []int64
	admin(`SELECT array_agg(token ORDER BY array_position($1::text[], name)) FROM lease.leases WHERE name = ANY($1::text[]) AND owner IS NOT NULL`,
		[]interface{}{[]string{a, b}}, &server) //nolint:errcheck
	names := both.Names()
	report(len(names) == 2 && names[0] == a && len(server) == 2 && both.TokenOf(a) == server[0] && both.TokenOf(b) == server[1] &&
		both.Tokens()[b] == server[1] && server[0] != server[1],
		"acquire all: one token per name, aligned with the names given, each the server's", both.Tokens(), server)
	conn := connect(conninfo)
	defer conn.Close(bg)
	write := func(names ...string) error {
		return both.Tx(ctx, conn, func(tx pgx.Tx) error {
			for _, name := range names {
				if _, err := tx.Exec(ctx, `INSERT INTO client_work (lease_name, note, fence_token) VALUES ($1, 'both', $2)`,
					name, both.TokenOf(name)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	first := write(a, b)
	_, _, other := pglease.HoldAll(bg, config(), []string{c, b}, pglease.Options{TTL: 5 * time.Second, Wait: 200 * time.Millisecond})
	var cState string
	admin(`SELECT coalesce((SELECT state FROM lease.status WHERE name = $1), 'never granted')`, []interface{}{c}, &cState) //nolint:errcheck
	report(errors.Is(other, pglease.ErrNotAcquired) && cState != "held",
		"acquire all: an overlapping set is not acquired, and holds nothing (all or none)", other, cState)
	admin(`SELECT lease.lease_revoke($1)`, []interface{}{b}, new(int64)) //nolint:errcheck
	err = write(a)
	var written int
	admin(`SELECT count(*) FROM client_work WHERE lease_name IN ($1, $2)`, []interface{}{a, b}, &written) //nolint:errcheck
	report(first == nil && pglease.IsFenced(err) && written == 2,
		"acquire all: fenced rows under each name's own token; one name revoked, the next Tx returns the *FencedError", first, err, written)
}

func testValues() {
	name := prefix + "leader"
	lease, ctx, err := pglease.Hold(bg, config(), name, pglease.Options{Owner: "go-leader", TTL: 2 * time.Second})
	if err != nil {
		report(false, "values: hold", err)
		return
	}
	defer lease.Release()
	conn := connect(conninfo)
	defer conn.Close(bg)
	stored, err := lease.SetValue(ctx, nil, map[string]string{"addr": "10.0.0.5:5432"})
	holders, lerr := pglease.Leader(bg, conn, name)
	var value map[string]string
	if len(holders) == 1 {
		json.Unmarshal(holders[0].Value, &value) //nolint:errcheck
	}
	report(err == nil && lerr == nil && stored && len(holders) == 1 && holders[0].Owner == "go-leader" &&
		holders[0].Token == lease.Token() && value["addr"] == "10.0.0.5:5432" && !holders[0].ExpiresAt.IsZero(),
		"SetValue, then Leader(name): owner, token, the value published, expires_at", err, lerr, stored, holders)
	admin(`SELECT lease.lease_revoke($1)`, []interface{}{name}, new(int64)) //nolint:errcheck
	// SetValue still answers after the loss: false.
	select {
	case <-ctx.Done():
	case <-time.After(3 * time.Second):
	}
	stale, err1 := lease.SetValue(context.Background(), nil, "stale")
	staleConn, err2 := lease.SetValue(context.Background(), conn, "stale")
	holders, lerr = pglease.Leader(bg, conn, name)
	report(err1 == nil && err2 == nil && !stale && !staleConn && lerr == nil && len(holders) == 0,
		"SetValue with a stale token returns false (on the helper's connection and on yours), and publishes nothing", err1, err2, stale, staleConn, holders)
}

func testSessionPrimitives() {
	s1, _, err1 := pglease.OpenSession(bg, config(), pglease.Options{TTL: 5 * time.Second})
	s2, _, err2 := pglease.OpenSession(bg, config(), pglease.Options{TTL: 5 * time.Second})
	if err1 != nil || err2 != nil {
		report(false, "open sessions", err1, err2)
		return
	}
	names := []string{prefix + "s-acct:2", prefix + "s-acct:1"}
	held, err := s1.AcquireAll(bg, names, 0)
	var server []int64
	admin(`SELECT array_agg(token ORDER BY array_position($1::text[], name)) FROM lease.leases WHERE name = ANY($1::text[]) AND session = $2`,
		[]interface{}{names, s1.ID()}, &server) //nolint:errcheck
	report(err == nil && len(server) == 2 && held.TokenOf(names[0]) == server[0] && held.TokenOf(names[1]) == server[1],
		"session: AcquireAll gives a token per name, aligned with the names", err, server)
	sem, shared := prefix+"s-semaphore", prefix+"s-shared"
	permit, errP := s1.Acquire(bg, sem, 0, pglease.AcquireOptions{Permits: 1})
	_, second := s2.Acquire(bg, sem, 200*time.Millisecond, pglease.AcquireOptions{Permits: 1})
	r1, errR1 := s1.Acquire(bg, shared, 0, pglease.AcquireOptions{Shared: true})
	r2, errR2 := s2.Acquire(bg, shared, 0, pglease.AcquireOptions{Shared: true})
	published, errV := r1.SetValue(bg, nil, "reader-1")
	conn := connect(conninfo)
	defer conn.Close(bg)
	holders, _ := pglease.Leader(bg, conn, shared)
	values := map[string]bool{}
	for _, h := range holders {
		values[string(h.Value)] = true
	}
	report(errP == nil && permit.Token() > 0 && errors.Is(second, pglease.ErrNotAcquired) && errR1 == nil && errR2 == nil &&
		r1.Token() != r2.Token() && errV == nil && published && len(holders) == 2 && values[`"reader-1"`],
		"session: a semaphore permit (a second session is not acquired) and two shared grants, one with a value", errP, second, errR1, errR2, errV, holders)
	s1.Close()
	s2.Close()
	report(leaderCount(sem) == 0 && leaderCount(shared) == 0 && leaderCount(names[0]) == 0,
		"session: closing the sessions ends their permits, shared and all-or-none grants")
}

func testPrimitivesBadInput() {
	unreachable, err := pglease.ParseConfig("host=127.0.0.1 port=1 dbname=postgres connect_timeout=1")
	if err != nil {
		panic(err)
	}
	check := func(err error, message string) {
		got := fmt.Sprint(err)
		report(got == message, "bad input refused before any round trip: "+message, got)
	}
	_, _, err = pglease.Hold(bg, unreachable, "x", pglease.Options{Permits: 2, Shared: true})
	check(err, "pglease: permits and shared exclude each other")
	_, _, err = pglease.Hold(bg, unreachable, "x", pglease.Options{Permits: -1})
	check(err, "pglease: permits must be between 1 and 10000")
	_, _, err = pglease.HoldAll(bg, unreachable, nil, pglease.Options{})
	check(err, "pglease: no lease names given")
	_, _, err = pglease.HoldAll(bg, unreachable, []string{"a", ""}, pglease.Options{})
	check(err, "pglease: the lease name must not be empty")
}

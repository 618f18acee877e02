// Tests of the Go helper (clients/go) against a real cluster; run by
// test/clients/run.sh, which sets the environment (CLIENTS_CONNINFO,
// CLIENTS_ADMIN, CLIENTS_PREFIX, CLIENTS_SERVER_STOP/START: see
// python_test.py). Prints "ok - ..." / "not ok - ..." lines and "# end".
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v4"

	"pglease"
)

var (
	conninfo = os.Getenv("CLIENTS_CONNINFO")
	adminURL = os.Getenv("CLIENTS_ADMIN")
	prefix   = os.Getenv("CLIENTS_PREFIX")
	bg       = context.Background()
)

func report(ok bool, description string, diagnostic ...interface{}) {
	if ok {
		fmt.Println("ok - " + description)
		return
	}
	fmt.Println("not ok - " + description)
	if len(diagnostic) > 0 {
		for _, line := range strings.Split(fmt.Sprint(diagnostic...), "\n") {
			fmt.Println("#   " + line)
		}
	}
}

func config() *pgx.ConnConfig {
	cfg, err := pgx.ParseConfig(conninfo)
	if err != nil {
		panic(err)
	}
	return cfg
}

func connect(url string) *pgx.Conn {
	conn, err := pgx.Connect(bg, url)
	if err != nil {
		panic(err)
	}
	return conn
}

// admin runs one query straight on the server and scans its row.
func admin(query string, args []interface{}, dest ...interface{}) error {
	conn := connect(adminURL)
	defer conn.Close(bg)
	return conn.QueryRow(bg, query, args...).Scan(dest...)
}

type leaseRow struct {
	owner, token, state string
	expires             float64
}

func row(name string) leaseRow {
	var r leaseRow
	var owner *string
	err := admin(`SELECT owner, token::text, state, extract(epoch FROM expires_at)::float8 FROM lease.status WHERE name = $1`,
		[]interface{}{name}, &owner, &r.token, &r.state, &r.expires)
	if err != nil {
		panic(err)
	}
	if owner != nil {
		r.owner = *owner
	}
	return r
}

func testAcquireReleaseBigint() {
	name := prefix + "acquire"
	lease, _, err := pglease.Hold(bg, config(), name, pglease.Options{Owner: "go-a", TTL: 5 * time.Second})
	if err != nil {
		report(false, "acquire", err)
		return
	}
	r := row(name)
	report(lease.Token() > 1<<53 && strconv.FormatInt(lease.Token(), 10) == r.token && r.state == "held" && r.owner == "go-a",
		fmt.Sprintf("acquire: token %d (> 2^53) is the server's exactly, lease held by the owner", lease.Token()), r)
	first := lease.Token()
	err = lease.Release()
	r = row(name)
	report(err == nil && r.state == "free", "Release releases the lease", err, r.state)

	lease, _, err = pglease.Hold(bg, config(), name, pglease.Options{Owner: "go-a", TTL: 5 * time.Second})
	if err != nil {
		report(false, "acquire again", err)
		return
	}
	defer lease.Release()
	r = row(name)
	report(lease.Token() == first+1 && strconv.FormatInt(lease.Token(), 10) == r.token,
		fmt.Sprintf("bigint tokens round-trip exactly, odd and even: %d, %d", first, lease.Token()), r.token)
}

func testNotAcquired() {
	name := prefix + "busy"
	first, _, err := pglease.Hold(bg, config(), name, pglease.Options{Owner: "go-first", TTL: 5 * time.Second})
	if err != nil {
		report(false, "acquire", err)
		return
	}
	defer first.Release()
	_, _, err = pglease.Hold(bg, config(), name, pglease.Options{Owner: "go-second"})
	report(errors.Is(err, pglease.ErrNotAcquired), "a held lease is not acquired: ErrNotAcquired (Wait 0; the NULL token is scanned)", err)
	started := time.Now()
	_, _, err = pglease.Hold(bg, config(), name, pglease.Options{Owner: "go-second", Wait: 400 * time.Millisecond})
	waited := time.Since(started)
	report(errors.Is(err, pglease.ErrNotAcquired) && waited >= 400*time.Millisecond && waited < 1500*time.Millisecond,
		fmt.Sprintf("ErrNotAcquired after Wait 400ms (took %v)", waited.Round(time.Millisecond)), err)
}

// testWaiterWoken: a waiter is woken by the release, because the server
// queues it (no polling every TTL/10, 1s here).
func testWaiterWoken() {
	name := prefix + "wait"
	first, _, err := pglease.Hold(bg, config(), name, pglease.Options{Owner: "go-first", TTL: 10 * time.Second})
	if err != nil {
		report(false, "acquire", err)
		return
	}
	releasing := make(chan time.Time, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		releasing <- time.Now()
		first.Release()
	}()
	second, _, err := pglease.Hold(bg, config(), name, pglease.Options{Owner: "go-second", TTL: 10 * time.Second, Wait: 3 * time.Second})
	if err != nil {
		report(false, "the waiter acquires", err)
		return
	}
	took := time.Since(<-releasing)
	second.Release()
	report(second.Token() > first.Token() && took < 300*time.Millisecond,
		fmt.Sprintf("a waiter gets the lease %v after the holder starts releasing it (Wait 3s, TTL 10s)", took.Round(time.Millisecond)))
}

func testErrors() {
	_, _, err := pglease.Hold(bg, config(), "go-bad", pglease.Options{TTL: 50 * time.Millisecond})
	report(err != nil && strings.Contains(err.Error(), "100 ms"), "a TTL under 100ms is refused", err)
	_, _, err = pglease.Hold(bg, config(), "", pglease.Options{})
	report(err != nil, "an empty lease name is refused", err)
	unreachable, _ := pgx.ParseConfig(conninfo + " port=1")
	_, _, err = pglease.Hold(bg, unreachable, "go-unreachable", pglease.Options{})
	report(err != nil && !errors.Is(err, pglease.ErrNotAcquired), "an unreachable server: a connection error", err)
}

// testBadInput: the same bad input gets the same message from every helper
// (docs/clients.md, "Bad input"), and no panic, before any round trip: the
// server here is unreachable, so a round trip would fail differently.
func testBadInput() {
	down, err := pglease.ParseConfig(conninfo + " port=1")
	if err != nil {
		report(false, "ParseConfig", err)
		return
	}
	var nilCtx context.Context
	cases := []struct {
		what, message string
		call          func() error
	}{
		{"an empty name", "pglease: the lease name must not be empty", func() error {
			_, _, err := pglease.Hold(bg, down, "", pglease.Options{})
			return err
		}},
		{"a negative TTL", "pglease: the ttl must be at least 100 ms, not -1s", func() error {
			_, _, err := pglease.Hold(bg, down, "go-bad", pglease.Options{TTL: -time.Second})
			return err
		}},
		{"a negative Wait", "pglease: wait must not be negative", func() error {
			_, _, err := pglease.Hold(bg, down, "go-bad", pglease.Options{Wait: -time.Millisecond})
			return err
		}},
		{"no connection (a nil config)", "pglease: no connection given", func() error {
			_, _, err := pglease.Hold(bg, nil, "go-bad", pglease.Options{})
			return err
		}},
		{"no context (nil)", "pglease: no context given", func() error {
			_, _, err := pglease.Hold(nilCtx, down, "go-bad", pglease.Options{})
			return err
		}},
		{"a malformed key=value string", "pglease: malformed connection string: ", func() error {
			_, err := pglease.ParseConfig("host=/tmp port=1 dbname")
			return err
		}},
		{"a malformed URI", "pglease: malformed connection string: ", func() error {
			_, err := pglease.ParseConfig("postgresql://[::1")
			return err
		}},
		{"Release on a nil *Lease", "pglease: no lease (a nil *Lease)", func() error {
			var lease *pglease.Lease
			return lease.Release()
		}},
	}
	for _, c := range cases {
		func() {
			defer func() {
				if p := recover(); p != nil {
					report(false, fmt.Sprintf("bad input, %s: %q, no panic", c.what, c.message), p)
				}
			}()
			err := c.call()
			ok := err != nil && (err.Error() == c.message || strings.HasSuffix(c.message, ": ") && strings.HasPrefix(err.Error(), c.message))
			report(ok, fmt.Sprintf("bad input, %s: %q before any round trip, no panic", c.what, c.message), err)
		}()
	}

	lease, _, err := pglease.Hold(bg, config(), prefix+"bad-input", pglease.Options{TTL: 5 * time.Second})
	if err != nil {
		report(false, "acquire", err)
		return
	}
	defer lease.Release()
	var nilConn *pgx.Conn
	for _, c := range []struct {
		what, message string
		call          func() error
	}{
		{"Tx(ctx, nil, fn)", "pglease: no connection given", func() error { return lease.Tx(bg, nil, func(pgx.Tx) error { return nil }) }},
		{"Tx(ctx, (*pgx.Conn)(nil), fn)", "pglease: no connection given", func() error { return lease.Tx(bg, nilConn, func(pgx.Tx) error { return nil }) }},
		{"Tx(nil, db, fn)", "pglease: no context given", func() error { return lease.Tx(nilCtx, nilConn, nil) }},
		{"Tx(ctx, db, nil)", "pglease: Tx needs a function to run", func() error { return lease.Tx(bg, connect(conninfo), nil) }},
		{"Fence(ctx, nil)", "pglease: no connection given", func() error { return lease.Fence(bg, nil) }},
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					report(false, fmt.Sprintf("bad input, %s: %q, no panic", c.what, c.message), p)
				}
			}()
			err := c.call()
			report(err != nil && err.Error() == c.message, fmt.Sprintf("bad input, %s: %q, no panic", c.what, c.message), err)
		}()
	}
}

// testSession: one keepalive for a session's leases, its close releases them
// all, a session closed behind its back is a loss, and pools in fair shares.
func testSession() {
	aName, bName := prefix+"session-a", prefix+"session-b"
	session, ctx, err := pglease.OpenSession(bg, config(), pglease.Options{TTL: 2 * time.Second})
	if err != nil {
		report(false, "open a session", err)
		return
	}
	a, errA := session.Acquire(ctx, aName, 0)
	b, errB := session.Acquire(ctx, bName, 500*time.Millisecond)
	if errA != nil || errB != nil {
		report(false, "acquire under a session", errA, errB)
		session.Close()
		return
	}
	time.Sleep(5 * time.Second)
	ra, rb := row(aName), row(bName)
	report(session.Err() == nil && ra.state == "held" && rb.state == "held" && b.Token() > a.Token() && a.Token() > 1<<53,
		"a session keeps its two leases for 5 s (TTL 2 s) with its keepalive alone", session.Err(), ra, rb)
	conn := connect(conninfo)
	defer conn.Close(bg)
	err = a.Tx(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO client_log (lease_name, note) VALUES ($1, 'session')", aName)
		return err
	})
	var revoked int64
	if adminErr := admin("SELECT lease.lease_revoke($1)", []interface{}{bName}, &revoked); adminErr != nil {
		panic(adminErr)
	}
	errB = b.Tx(ctx, conn, func(tx pgx.Tx) error { return nil })
	var fencedErr *pglease.FencedError
	report(err == nil && errors.As(errB, &fencedErr) && fencedErr.Detail() != "",
		"a session lease fences: a revoked one's Tx returns *FencedError", err, errB)
	closeErr := session.Close()
	report(closeErr == nil && row(aName).state == "free", "Close closes the session: its leases are released", closeErr, row(aName))

	session, ctx, err = pglease.OpenSession(bg, config(), pglease.Options{TTL: 1500 * time.Millisecond})
	if err != nil {
		report(false, "open a session", err)
		return
	}
	var closed int
	if err := admin("SELECT lease.session_close($1)", []interface{}{session.ID()}, &closed); err != nil {
		panic(err)
	}
	start := time.Now()
	var took time.Duration = -1
	select {
	case <-ctx.Done():
		took = time.Since(start)
	case <-time.After(3 * time.Second):
	}
	_, acquireErr := session.Acquire(bg, bName, 0)
	closeErr = session.Close()
	report(took >= 0 && took <= 750*time.Millisecond && errors.Is(acquireErr, pglease.ErrLost) && errors.Is(closeErr, pglease.ErrLost),
		fmt.Sprintf("a session closed behind its back is lost at the next keepalive (%v); Acquire and Close then return ErrLost", took.Round(time.Millisecond)),
		acquireErr, closeErr)
}

func testPool() {
	pool := prefix + "pool"
	var put int
	if err := admin("SELECT count(lease.pool_put($1, $1 || ':' || i)) FROM generate_series(1, 4) AS i", []interface{}{pool}, &put); err != nil {
		panic(err)
	}
	first, _, err1 := pglease.OpenSession(bg, config(), pglease.Options{TTL: 5 * time.Second})
	second, _, err2 := pglease.OpenSession(bg, config(), pglease.Options{TTL: 5 * time.Second})
	if err1 != nil || err2 != nil {
		report(false, "open two sessions", err1, err2)
		return
	}
	defer first.Close()
	defer second.Close()
	mine, err := first.Claim(bg, pool, 0)
	report(err == nil && len(mine) == 4 && string(mine[0].State()) == "{}", "a lone claimer claims the whole pool", err, len(mine))
	theirs, err := second.Claim(bg, pool, 0)
	surplus, err2 := first.Surplus(bg, pool)
	report(err == nil && err2 == nil && len(theirs) == 0 && len(surplus) == 2,
		"a second claimer: nothing free yet; the first has two beyond its share", err, err2, len(theirs), surplus)
	byName := map[string]*pglease.SessionLease{}
	for _, m := range mine {
		byName[m.Name()] = m
	}
	releasedAll := true
	for _, name := range surplus {
		released, err := byName[name].Release(bg)
		releasedAll = releasedAll && err == nil && released
	}
	theirs, err = second.Claim(bg, pool, 0)
	report(err == nil && releasedAll && len(theirs) == 2, "what the first hands back, the second claims", err, len(theirs))
	if len(surplus) == 0 {
		return
	}
	old := byName[surplus[0]]
	stale, errStale := old.Checkpoint(bg, nil, map[string]int{"seq": 99})
	var fresh bool
	var errFresh error
	for _, t := range theirs {
		if t.Name() == old.Name() {
			fresh, errFresh = t.Checkpoint(bg, nil, map[string]int{"seq": 1})
		}
	}
	var state string
	if err := admin("SELECT state::text FROM lease.pool_resources WHERE name = $1", []interface{}{old.Name()}, &state); err != nil {
		panic(err)
	}
	report(errStale == nil && errFresh == nil && !stale && fresh && state == `{"seq": 1}`,
		"Checkpoint under a stale token is false and changes nothing; under the current one it stores the state", stale, fresh, state, errStale, errFresh)
	var nilSession *pglease.Session
	_, nilErr := nilSession.Claim(bg, pool, 0)
	_, _, nilConfig := pglease.OpenSession(bg, nil, pglease.Options{})
	report(nilErr != nil && nilConfig != nil && nilConfig.Error() == "pglease: no connection given",
		"bad input, a nil *Session and OpenSession(ctx, nil, ...): errors, no panic", nilErr, nilConfig)
}

func testHeartbeat() {
	name := prefix + "heartbeat"
	lease, ctx, err := pglease.Hold(bg, config(), name, pglease.Options{TTL: time.Second})
	if err != nil {
		report(false, "acquire", err)
		return
	}
	defer lease.Release()
	time.Sleep(3500 * time.Millisecond)
	r := row(name)
	var recent bool
	if err := admin(`SELECT clock_timestamp() - renewed_at < interval '0.5 s' FROM lease.leases WHERE name = $1`,
		[]interface{}{name}, &recent); err != nil {
		panic(err)
	}
	report(ctx.Err() == nil && lease.Err() == nil && r.state == "held" && r.token == strconv.FormatInt(lease.Token(), 10) && recent,
		"heartbeats keep a 1s lease for 3.5s under the same token", lease.Err(), r, recent)
}

func testFence() {
	name := prefix + "fence"
	lease, _, err := pglease.Hold(bg, config(), name, pglease.Options{TTL: 5 * time.Second})
	if err != nil {
		report(false, "acquire", err)
		return
	}
	defer lease.Release()
	conn := connect(conninfo)
	defer conn.Close(bg)
	err = lease.Tx(bg, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(bg, "INSERT INTO client_work (lease_name, note) VALUES ($1, 'fenced')", name); err != nil {
			return err
		}
		_, err := tx.Exec(bg, "UPDATE client_work SET note = 'updated' WHERE lease_name = $1", name)
		return err
	})
	var note, token string
	scanErr := admin("SELECT note, fence_token::text FROM client_work WHERE lease_name = $1", []interface{}{name}, &note, &token)
	report(err == nil && scanErr == nil && note == "updated" && token == strconv.FormatInt(lease.Token(), 10),
		"lease.Tx: INSERT and UPDATE pass the fence trigger; the row carries the token", err, scanErr, note, token)
	err = lease.Tx(bg, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(bg, "DELETE FROM client_work WHERE lease_name = $1", name)
		return err
	})
	var count int
	if err := admin("SELECT count(*) FROM client_work WHERE lease_name = $1", []interface{}{name}, &count); err != nil {
		panic(err)
	}
	report(err == nil && count == 0, "lease.Tx: DELETE passes the fence trigger", err, count)

	tx, err := conn.Begin(bg)
	if err == nil {
		err = lease.Fence(bg, tx)
		tx.Rollback(bg)
	}
	report(err == nil, "lease.Fence(ctx, tx) on a transaction the application began", err)

	_, err = conn.Exec(bg, "SELECT lease.fenced_write($1, $2)", name, lease.Token()-1)
	report(pglease.IsFenced(err), "IsFenced recognises LF001 from any pgx call", err)
}

func testRevoked() {
	name := prefix + "revoked"
	lease, ctx, err := pglease.Hold(bg, config(), name, pglease.Options{TTL: 1500 * time.Millisecond})
	if err != nil {
		report(false, "acquire", err)
		return
	}
	var revokedToken int64
	if err := admin("SELECT lease.lease_revoke($1)", []interface{}{name}, &revokedToken); err != nil {
		panic(err)
	}
	revoked := time.Now()
	var took time.Duration
	select {
	case <-ctx.Done():
		took = time.Since(revoked)
	case <-time.After(3 * time.Second):
		took = -1
	}
	report(took >= 0 && took <= 750*time.Millisecond && errors.Is(lease.Err(), pglease.ErrLost),
		fmt.Sprintf("a revoked lease is lost at the next heartbeat: context cancelled after %v", took.Round(time.Millisecond)), lease.Err())

	// Under the lease's own, cancelled, context, as the README's example does.
	conn := connect(conninfo)
	defer conn.Close(bg)
	err = lease.Tx(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO client_log (lease_name, note) VALUES ($1, 'after revoke')", name)
		return err
	})
	var written int
	if err := admin("SELECT count(*) FROM client_log WHERE lease_name = $1", []interface{}{name}, &written); err != nil {
		panic(err)
	}
	var fencedErr *pglease.FencedError
	report(errors.As(err, &fencedErr) && fencedErr.PgErr.Code == "LF001" && written == 0,
		"a fenced transaction under the revoked token, with the lease's cancelled context, returns *FencedError (LF001) from the fence itself: nothing written to a table without a fence trigger",
		err, written)
	report(fencedErr != nil && fencedErr.Detail() != "" && strings.Contains(fencedErr.Error(), fencedErr.Detail()),
		"the *FencedError keeps the server's DETAIL (Detail(), and in Error())", err)
	var one int
	selectErr := conn.QueryRow(bg, "SELECT 1").Scan(&one)
	report(!conn.IsClosed() && selectErr == nil && one == 1, "Tx after the loss leaves the caller's connection open and usable", selectErr)
	err = lease.Release()
	report(errors.Is(err, pglease.ErrLost), "Release after the loss returns the ErrLost error", err)
}

// zombieChild holds the lease, waits for a line on stdin (the parent stops and
// continues this process in between), then tries a fenced write.
func zombieChild(name string) {
	conn := connect(conninfo)
	defer conn.Close(bg)
	lease, ctx, err := pglease.Hold(bg, config(), name, pglease.Options{Owner: "go-zombie", TTL: time.Second})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println(lease.Token())
	bufio.NewReader(os.Stdin).ReadString('\n')
	err = lease.Tx(bg, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(bg, "INSERT INTO client_work (lease_name, note) VALUES ($1, 'zombie')", name)
		return err
	})
	var fencedErr *pglease.FencedError
	switch {
	case errors.As(err, &fencedErr):
		fmt.Println("fenced", fencedErr.PgErr.Code)
	case err == nil:
		fmt.Println("written")
	default:
		fmt.Println("error", err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
	}
	if errors.Is(lease.Release(), pglease.ErrLost) {
		fmt.Println("lost")
	} else {
		fmt.Println("not lost")
	}
}

func testZombie() {
	name := prefix + "zombie"
	child := exec.Command(os.Args[0], "zombie", name)
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		report(false, "start the zombie", err)
		return
	}
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()
	lines := bufio.NewReader(stdout)
	line, _ := lines.ReadString('\n')
	zombieToken, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		report(false, "the zombie acquires", line)
		return
	}
	child.Process.Signal(syscall.SIGSTOP)
	time.Sleep(1300 * time.Millisecond)
	successor, _, err := pglease.Hold(bg, config(), name, pglease.Options{Owner: "go-successor", TTL: 5 * time.Second, Wait: 3 * time.Second})
	if err != nil {
		child.Process.Signal(syscall.SIGCONT)
		report(false, "the successor takes over", err)
		return
	}
	defer successor.Release()
	child.Process.Signal(syscall.SIGCONT)
	fmt.Fprintln(stdin, "go")
	outcome, _ := lines.ReadString('\n')
	ending, _ := lines.ReadString('\n')
	var written int
	if err := admin("SELECT count(*) FROM client_work WHERE lease_name = $1", []interface{}{name}, &written); err != nil {
		panic(err)
	}
	report(strings.TrimSpace(outcome) == "fenced LF001" && written == 0 && successor.Token() > zombieToken,
		"a zombie stopped past its TTL: its fenced write after the takeover returns *FencedError, nothing written",
		outcome, written)
	report(strings.TrimSpace(ending) == "lost", "the zombie's helper reports the loss once it runs again", ending)
}

func testOutage() {
	name := prefix + "outage"
	lease, ctx, err := pglease.Hold(bg, config(), name, pglease.Options{TTL: 4 * time.Second})
	if err != nil {
		report(false, "acquire", err)
		return
	}
	time.Sleep(1500 * time.Millisecond) // past the first heartbeat
	if err := exec.Command("sh", "-c", os.Getenv("CLIENTS_SERVER_STOP")).Run(); err != nil {
		panic(err)
	}
	stopped := time.Now()
	var lostAt time.Time
	select {
	case <-ctx.Done():
		lostAt = time.Now()
	case <-time.After(5 * time.Second):
	}
	releaseErr := lease.Release()
	if err := exec.Command("sh", "-c", os.Getenv("CLIENTS_SERVER_START")).Run(); err != nil {
		panic(err)
	}
	r := row(name)
	margin := r.expires - float64(lostAt.UnixNano())/1e9
	report(!lostAt.IsZero() && margin >= 0.6 && lostAt.Sub(stopped) < 4*time.Second && errors.Is(releaseErr, pglease.ErrLost),
		fmt.Sprintf("the database stops: context cancelled %.0f ms before the lease expires on the server (grace 800 + TTL/10 400 expected, at least 600 required; TTL 4 s), %v after the outage began",
			math.Round(margin*1000), lostAt.Sub(stopped).Round(time.Millisecond)), releaseErr)
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "zombie" {
		zombieChild(os.Args[2])
		return
	}
	tests := []struct {
		name string
		run  func()
	}{
		{"acquire", testAcquireReleaseBigint},
		{"not acquired", testNotAcquired},
		{"waiter woken", testWaiterWoken},
		{"errors", testErrors},
		{"bad input", testBadInput},
		{"session", testSession},
		{"pool", testPool},
		{"heartbeat", testHeartbeat},
		{"fence", testFence},
		{"revoked", testRevoked},
		{"semaphore", testSemaphore},
		{"semaphore revoked", testSemaphoreRevoked},
		{"shared", testShared},
		{"acquire all", testAcquireAll},
		{"values", testValues},
		{"session primitives", testSessionPrimitives},
		{"primitives bad input", testPrimitivesBadInput},
		{"watch since", testWatchSince},
		{"watch bad input", testWatchBadInput},
		{"watch server error", testWatchServerError},
		{"zombie", testZombie},
		{"outage", testOutage},
	}
	for _, test := range tests {
		func() {
			defer func() {
				if p := recover(); p != nil {
					report(false, test.name+" ran", p)
				}
			}()
			test.run()
		}()
	}
	fmt.Println("# end")
}

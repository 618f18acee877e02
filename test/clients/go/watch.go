// Tests of the Go helper's Watch that need no partition: where it starts
// (Since a position, SinceTime) and bad input; run.sh partitions the README's
// watch example. Part of the program in main.go.
package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"pglease"
)

// watchEvents makes events named <base>-1 .. <base>-n, one transaction each.
func watchEvents(base string, n int) {
	for i := 1; i <= n; i++ {
		var token int64
		if err := admin(`SELECT lease.lease_acquire($1, 'watch-test', '1 hour')`, []interface{}{fmt.Sprintf("%s-%d", base, i)}, &token); err != nil {
			panic(err)
		}
	}
}

// historyPositions: the positions of lease.history's rows matching where
// ($1: a position or time, $2: the last position), in position order.
func historyPositions(where string, from interface{}, last string) []string {
	conn := connect(adminURL)
	defer conn.Close(bg)
	rows, err := conn.Query(bg, `SELECT xid || '/' || ordinal FROM lease.history WHERE `+where+`
	                               AND (xid, ordinal) <= (split_part($2, '/', 1)::xid8, split_part($2, '/', 2)::int8)
	                             ORDER BY xid, ordinal`, from, last)
	if err != nil {
		panic(err)
	}
	defer rows.Close()
	var positions []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			panic(err)
		}
		positions = append(positions, p)
	}
	return positions
}

// watchUntil watches with opts until the event of name last, and returns the
// positions seen, the replayed flags, and the last position.
func watchUntil(opts pglease.WatchOptions, before func(), last string) ([]string, []bool, string, error) {
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	watcher, err := pglease.Watch(ctx, config(), opts)
	if err != nil {
		return nil, nil, "", err
	}
	var positions []string
	var replayed []bool
	first := true
	for event := range watcher.Events() {
		if first {
			// Live events from here on.
			before()
			first = false
		}
		positions = append(positions, event.Position)
		replayed = append(replayed, event.Replayed)
		if event.Name == last {
			return positions, replayed, event.Position, nil
		}
	}
	return positions, replayed, "", fmt.Errorf("the watch ended before %s: %w", last, watcher.Err())
}

func testWatchSince() {
	base := prefix + "watch-since"
	watchEvents(base, 5)
	var since string
	if err := admin(`SELECT xid || '/' || ordinal FROM lease.history WHERE name = $1`, []interface{}{base + "-2"}, &since); err != nil {
		panic(err)
	}
	end := base + "-end"
	positions, replayed, last, err := watchUntil(pglease.WatchOptions{Since: since}, func() { watchEvents(end, 1) }, end+"-1")
	want := []string(nil)
	if err == nil {
		want = historyPositions(`(xid, ordinal) > (split_part($1, '/', 1)::xid8, split_part($1, '/', 2)::int8)`, since, last)
	}
	report(err == nil && len(positions) >= 4 && fmt.Sprint(positions) == fmt.Sprint(want) && replayed[0] && !replayed[len(replayed)-1],
		"watch: Since a position replays every event after it (replayed), then goes on live, each once, in order",
		fmt.Sprintf("err %v; got %v (replayed %v); want %v", err, positions, replayed, want))

	var at time.Time
	if err := admin(`SELECT at FROM lease.history WHERE name = $1`, []interface{}{base + "-3"}, &at); err != nil {
		panic(err)
	}
	end = base + "-time-end"
	positions, _, last, err = watchUntil(pglease.WatchOptions{SinceTime: at}, func() { watchEvents(end, 1) }, end+"-1")
	want = nil
	if err == nil {
		want = historyPositions(`at >= $1`, at, last)
	}
	report(err == nil && len(positions) >= 4 && fmt.Sprint(positions) == fmt.Sprint(want),
		"watch: SinceTime replays the events recorded from then on, in position order, then goes on live",
		fmt.Sprintf("err %v; got %v; want %v", err, positions, want))
}

func testWatchBadInput() {
	for _, bad := range []string{"garbage", "12/", "/3", "1/2/3", "-1/2", "1/-2", "03:00", "1/9223372036854775808", "18446744073709551616/1"} {
		_, err := pglease.Watch(bg, config(), pglease.WatchOptions{Since: bad})
		report(err != nil && strings.HasPrefix(err.Error(), "pglease: since must be a position XID/N"),
			fmt.Sprintf("watch: Since %q is an error before anything connects", bad), err)
	}
	_, err := pglease.Watch(bg, config(), pglease.WatchOptions{Since: "1/1", SinceTime: time.Now()})
	report(err != nil && err.Error() == "pglease: Since and SinceTime exclude each other", "watch: Since and SinceTime together are an error", err)
	_, err = pglease.Watch(bg, nil, pglease.WatchOptions{})
	report(err != nil && err.Error() == "pglease: no connection given", "watch: a nil config is an error", err)
}

// A server without lease 1.4's events_horizon: an error that connecting again
// would not mend ends the watch, and Err says it.
func testWatchServerError() {
	conn := connect(adminURL)
	defer conn.Close(bg)
	if _, err := conn.Exec(bg, "CREATE DATABASE watch_no_lease"); err != nil {
		panic(err)
	}
	defer conn.Exec(bg, "DROP DATABASE watch_no_lease") //nolint:errcheck
	cfg := config()
	cfg.Database = "watch_no_lease"
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	watcher, err := pglease.Watch(ctx, cfg, pglease.WatchOptions{})
	if err != nil {
		panic(err)
	}
	for range watcher.Events() {
	}
	report(ctx.Err() == nil && watcher.Err() != nil && strings.Contains(watcher.Err().Error(), "does not exist"),
		"watch: an error of the server (no lease extension) ends the watch, and Err returns it", watcher.Err())
}

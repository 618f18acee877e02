// A client helper's lease holder for test/netfault/run.sh (Go); see
// partitioned.py for what it prints (times: the wall clock in microseconds).
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v4"

	"pglease"
)

const insert = "INSERT INTO nf_work (lease_name, note) VALUES ($1, $2)"

func main() {
	conninfo, name := os.Getenv("NF_CONNINFO"), os.Getenv("NF_NAME")
	ttl, _ := strconv.Atoi(os.Getenv("NF_TTL_MS"))
	config, err := pglease.ParseConfig(conninfo)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	acquireInvoke := time.Now().UnixMicro()
	lease, leaseCtx, err := pglease.Hold(context.Background(), config, name, pglease.Options{TTL: time.Duration(ttl) * time.Millisecond})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	acquireComplete := time.Now().UnixMicro()
	defer lease.Release() //nolint:errcheck // lost by then
	write := func(note string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, conninfo)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return lease.Tx(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, insert, name, note)
			return err
		})
	}
	writeInvoke := time.Now().UnixMicro()
	if err := write("held"); err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("held", lease.Token(), acquireInvoke, acquireComplete, writeInvoke, time.Now().UnixMicro())
	select {
	case <-leaseCtx.Done():
		fmt.Println("lost", time.Now().UnixMilli())
	case <-time.After(30 * time.Second):
	}
	bufio.NewReader(os.Stdin).ReadString('\n') //nolint:errcheck // any line, or the end
	writeInvoke = time.Now().UnixMicro()
	err = write("zombie")
	switch writeComplete := time.Now().UnixMicro(); {
	case err == nil:
		fmt.Println("written", writeInvoke, writeComplete)
	case pglease.IsFenced(err):
		fmt.Println("fenced", writeInvoke, writeComplete)
	default:
		fmt.Println("error", writeInvoke, writeComplete, err)
	}
}

package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/valkeyops"
)

// clusterClient is a cluster-mode client authenticating as the default user.
func clusterClient(addrs []string, password string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: addrs, Password: password, DisableCache: true,
		Dialer: net.Dialer{Timeout: 5 * time.Second}})
}

// nodeClient talks to exactly one server.
func nodeClient(addr, password string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, Password: password, ForceSingleClient: true,
		DisableCache: true, Dialer: net.Dialer{Timeout: 5 * time.Second}})
}

// clusterNodes is one server's CLUSTER NODES, parsed.
func clusterNodes(ctx context.Context, addr, password string) ([]valkeyops.ClusterNode, error) {
	c, err := nodeClient(addr, password)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	text, err := c.Do(ctx, c.B().ClusterNodes().Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
	}
	return valkeyops.ParseClusterNodes(text)
}

func dbsize(ctx context.Context, addr, password string) (int64, error) {
	c, err := nodeClient(addr, password)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
}

// configGet reads one parameter of one server.
func configGet(ctx context.Context, addr, password, name string) (string, error) {
	c, err := nodeClient(addr, password)
	if err != nil {
		return "", err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := c.Do(ctx, c.B().ConfigGet().Parameter(name).Build()).AsStrMap()
	if err != nil {
		return "", fmt.Errorf("CONFIG GET %s on %s: %w", name, addr, err)
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("CONFIG GET %s on %s: no such parameter", name, addr)
	}
	return v, nil
}

func fillValue(i int) string {
	s := strconv.Itoa(i)
	for len(s) < *valueBytes {
		s = "0" + s
	}
	return s
}

// fill writes keys k:0..n-1 in pipelined batches of SETs through the cluster client.
func fill(ctx context.Context, c valkey.Client, n int) error {
	const batch = 5000
	for i := 0; i < n; i += batch {
		cmds := make(valkey.Commands, 0, batch)
		for j := i; j < min(n, i+batch); j++ {
			cmds = append(cmds, c.B().Set().Key("k:"+strconv.Itoa(j)).Value(fillValue(j)).Build())
		}
		bctx, cancel := context.WithTimeout(ctx, time.Minute)
		res := c.DoMulti(bctx, cmds...)
		cancel()
		for _, r := range res {
			if err := r.Error(); err != nil {
				return fmt.Errorf("fill at key %d: %w", i, err)
			}
		}
	}
	return nil
}

// sumDBSize adds up DBSIZE over the primaries that hold slots in view.
func sumDBSize(ctx context.Context, view []valkeyops.ClusterNode, password string, remap func(string) string) (int64, error) {
	var total int64
	for _, n := range view {
		if !n.IsPrimary() || len(n.Slots) == 0 || n.Failing() {
			continue
		}
		addr := n.Addr()
		if remap != nil {
			addr = remap(addr)
		}
		k, err := dbsize(ctx, addr, password)
		if err != nil {
			return 0, err
		}
		total += k
	}
	return total, nil
}

// slotWriter is the second, loadgen-like writer of a recovery: its keys all carry one hash
// tag, so every write goes to the one slot that tag hashes to, owned by the primary that is
// about to be lost. Unlike loadgen it keeps when each write ended and whether the server
// acknowledged it (SET answered OK), which is what writes-resumed is computed from.
type slotWriter struct {
	c       valkey.Client
	prefix  string
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	results []writeResult
}

type writeResult struct {
	end time.Time
	ok  bool
}

func startSlotWriter(c valkey.Client, prefix string) *slotWriter {
	w := &slotWriter{c: c, prefix: prefix, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := c.Do(ctx, c.B().Set().Key(prefix+strconv.Itoa(i)).Value("x").Build()).Error()
			cancel()
			w.mu.Lock()
			w.results = append(w.results, writeResult{end: time.Now(), ok: err == nil})
			w.mu.Unlock()
			time.Sleep(*pace)
		}
	}()
	return w
}

func (w *slotWriter) acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.results {
		if r.ok {
			n++
		}
	}
	return n
}

func (w *slotWriter) snapshot() []writeResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]writeResult(nil), w.results...)
}

func (w *slotWriter) finish() []writeResult {
	close(w.stop)
	<-w.done
	return w.results
}

// outage describes the writer's outage after t0 (the delete or kill). resumed runs from t0 to
// the first acknowledged write after the last failed one after t0 (failures are refusals,
// connection errors and 1 s timeouts); gap runs from the last acknowledged write before the
// first failure to that same write. With no failure after t0, the outage is the longest
// pause between two acknowledged writes after t0. failed counts the failures after t0.
func outage(results []writeResult, t0 time.Time) (resumed, gap time.Duration, failed int, err error) {
	firstFail, lastFail := -1, -1
	for i, r := range results {
		if !r.ok && r.end.After(t0) {
			if firstFail < 0 {
				firstFail = i
			}
			lastFail, failed = i, failed+1
		}
	}
	first := -1 // the write that ends the outage
	if lastFail >= 0 {
		for i := lastFail + 1; i < len(results) && first < 0; i++ {
			if results[i].ok {
				first = i
			}
		}
		if first < 0 {
			return 0, 0, failed, fmt.Errorf("no acknowledged write after the last failure (%d writes, %d failed after the loss)", len(results), failed)
		}
	} else {
		var longest time.Duration
		prev := -1
		for i, r := range results {
			if !r.ok {
				continue
			}
			if prev >= 0 && r.end.After(t0) && r.end.Sub(results[prev].end) > longest {
				longest, first = r.end.Sub(results[prev].end), i
			}
			prev = i
		}
		if first < 0 {
			return 0, 0, 0, fmt.Errorf("no acknowledged write after the loss (%d writes)", len(results))
		}
		firstFail = first
	}
	before := t0
	for i := firstFail - 1; i >= 0; i-- {
		if results[i].ok {
			before = results[i].end
			break
		}
	}
	return results[first].end.Sub(t0), results[first].end.Sub(before), failed, nil
}

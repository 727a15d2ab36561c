package valkeyops

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Options for the admin connection pool. Auth is mandatory (error if Credentials.Password is
// empty).
type Options struct {
	// Credentials say how to connect: user, password and, with a CA, TLS.
	Credentials Credentials
	// Remap turns an address a node announces into one this process can dial (nil = identity).
	Remap func(announced string) string
	// DialTimeout bounds connecting to one node (default 3s).
	DialTimeout time.Duration
	// Poll is the interval of every wait-for-condition loop (default 20ms).
	Poll time.Duration
	// MigrateBatch is how many keys one MIGRATE call moves (default DefaultMigrateBatch,
	// minimum 100).
	MigrateBatch int
	// AtomicRetries bounds CLUSTER MIGRATESLOTS attempts per move before falling back to the
	// key-by-key path (default 3).
	AtomicRetries int
	// DisableAtomic forces the SETSLOT/MIGRATE path even on Valkey >= 9.0.
	DisableAtomic bool
	// DedicatedIdle bounds how long the dedicated connections a slot move spreads its
	// SETSLOTs over stay open once returned: valkey-go closes every idle one DedicatedIdle
	// after the first is returned (default 30s).
	DedicatedIdle time.Duration
	// Log receives progress lines (steps and timings, never secrets); nil = silent.
	Log func(format string, args ...any)
}

// DefaultMigrateBatch is how many keys one MIGRATE call of the key-by-key slot move carries
// unless Options.MigrateBatch says otherwise (valkey-cli's --cluster-pipeline is the same
// knob; its default is 10).
const DefaultMigrateBatch = 1000

// Admin holds one authenticated connection per node address, reused across calls. It is safe
// for concurrent use.
type Admin struct {
	opts    Options
	tls     *tls.Config // from opts.Credentials; nil = plaintext
	mu      sync.Mutex
	clients map[string]valkey.Client
	closed  bool
}

// NewAdmin validates opts; connections are opened lazily, one per address.
func NewAdmin(opts Options) (*Admin, error) {
	if opts.Credentials.Password == "" {
		return nil, model.NewOpError("", "new-admin", model.ErrAuthRequired)
	}
	tlsCfg, err := opts.Credentials.TLSConfig()
	if err != nil {
		return nil, model.NewOpError("", "new-admin", fmt.Errorf("%w: %v", model.ErrInvalidSpec, err))
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 3 * time.Second
	}
	if opts.Poll <= 0 {
		opts.Poll = 20 * time.Millisecond
	}
	if opts.MigrateBatch < 100 {
		opts.MigrateBatch = DefaultMigrateBatch
	}
	if opts.AtomicRetries <= 0 {
		opts.AtomicRetries = 3
	}
	if opts.DedicatedIdle <= 0 {
		opts.DedicatedIdle = 30 * time.Second
	}
	return &Admin{opts: opts, tls: tlsCfg, clients: map[string]valkey.Client{}}, nil
}

// Close drops every connection; later operations fail with model.ErrUnreachable instead of dialing.
func (a *Admin) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for k, c := range a.clients {
		c.Close()
		delete(a.clients, k)
	}
}

// client returns the connection to addr, dialing it on first use (through Options.Remap, so
// callers may pass the addresses nodes announce). A failed dial is not cached.
func (a *Admin) client(addr string) (valkey.Client, error) {
	a.mu.Lock()
	c, ok := a.clients[addr]
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return nil, errAdminClosed
	}
	if ok {
		return c, nil
	}
	var tlsCfg *tls.Config
	if a.tls != nil {
		tlsCfg = a.tls.Clone()
	}
	c, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:       []string{a.remap(addr)},
		Username:          a.opts.Credentials.Username,
		Password:          a.opts.Credentials.Password,
		TLSConfig:         tlsCfg,
		ForceSingleClient: true,
		DisableCache:      true,
		DisableRetry:      true,
		// valkey-go pings an idle connection every Dialer.KeepAlive (1 s by default): with a
		// connection to every server of every cluster, that was a PING a second on each
		// server, ten times the operator's own traffic to an idle fleet. Every call has its
		// own deadline anyway, so a dead server is noticed by the next pass.
		Dialer:           net.Dialer{Timeout: a.opts.DialTimeout, KeepAlive: adminKeepAlive},
		ConnWriteTimeout: 30 * time.Second,
		ClientName:       "valkey-operator",
		// One operator holds a connection to every server of every cluster it manages, so
		// per-connection memory is what the fleet costs: valkey-go's defaults (0.5 MiB read
		// and write buffers, a 1024-slot ring, each slot with its own channel and two
		// condition variables) made 80 idle servers cost the operator over 100 MiB. Admin
		// traffic is small and mostly one caller per server at a time: a 32-slot ring (a
		// longer pipeline still streams through it, 32 commands in flight) and 8 KiB buffers
		// (a larger reply or command goes past them; they only bound one read or write call).
		ReadBufferEachConn:  adminConnBuffer,
		WriteBufferEachConn: adminConnBuffer,
		RingScaleEachConn:   5,
		// The dedicated connections a slot move spreads its SETSLOTs over (setslotConns)
		// are closed once idle, so they cost nothing between operations.
		BlockingPoolCleanup: a.opts.DedicatedIdle,
	})
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		c.Close()
		return nil, errAdminClosed
	}
	if old, ok := a.clients[addr]; ok {
		c.Close()
		return old, nil
	}
	a.clients[addr] = c
	return c, nil
}

// adminKeepAlive is the TCP keep-alive of admin connections and how often valkey-go pings
// one that is idle.
const adminKeepAlive = 30 * time.Second

// adminConnBuffer is the read and the write buffer of each admin connection.
const adminConnBuffer = 8 << 10

// drop forgets a connection after a transport error so the next call re-dials (a pod that
// restarted on the same IP needs a fresh connection and a fresh AUTH).
func (a *Admin) drop(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.clients[addr]; ok {
		c.Close()
		delete(a.clients, addr)
	}
}

// cmd runs one command on n and wraps any error as an model.OpError naming n and step.
func (a *Admin) cmd(ctx context.Context, n model.Node, step string, args ...string) (valkey.ValkeyMessage, error) {
	c, err := a.client(n.Addr)
	if err != nil {
		return valkey.ValkeyMessage{}, model.NewOpError(n.Name, step, fmt.Errorf("%w: %v", model.ErrUnreachable, err))
	}
	msg, err := c.Do(ctx, c.B().Arbitrary(args...).Build()).ToMessage()
	if err != nil {
		if _, isServerErr := valkey.IsValkeyErr(err); !isServerErr {
			a.drop(n.Addr)
		}
		return msg, model.NewOpError(n.Name, step, err)
	}
	return msg, nil
}

// str runs one command returning a string reply.
func (a *Admin) str(ctx context.Context, n model.Node, step string, args ...string) (string, error) {
	msg, err := a.cmd(ctx, n, step, args...)
	if err != nil {
		return "", err
	}
	s, err := msg.ToString()
	if err != nil {
		return "", model.NewOpError(n.Name, step, err)
	}
	return s, nil
}

// multi pipelines commands to n; the first failure is returned.
func (a *Admin) multi(ctx context.Context, n model.Node, step string, cmds [][]string) ([]valkey.ValkeyResult, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	c, err := a.client(n.Addr)
	if err != nil {
		return nil, model.NewOpError(n.Name, step, fmt.Errorf("%w: %v", model.ErrUnreachable, err))
	}
	built := make(valkey.Commands, len(cmds))
	for i, args := range cmds {
		built[i] = c.B().Arbitrary(args...).Build()
	}
	res := c.DoMulti(ctx, built...)
	for _, r := range res {
		if err := r.Error(); err != nil {
			if _, isServerErr := valkey.IsValkeyErr(err); !isServerErr {
				a.drop(n.Addr)
			}
			return res, model.NewOpError(n.Name, step, err)
		}
	}
	return res, nil
}

// setslotConns is how many connections one node's SETSLOT batch is spread over. Since Valkey
// 8.0 every CLUSTER SETSLOT blocks its client until the node's replicas acknowledge it, so a
// pipeline on one connection pays one replica round trip per slot; spreading the batch over
// a few connections (borrowed from the same per-node client's pool and returned right after)
// lets those waits overlap.
const setslotConns = 32

// multiSpreadPairs is multiSpread for a list where a STABLE command must stay on the same
// connection as, and right before, the command that follows it.
func (a *Admin) multiSpreadPairs(ctx context.Context, n model.Node, step string, cmds [][]string) error {
	var groups [][][]string
	for i := 0; i < len(cmds); i++ {
		g := [][]string{cmds[i]}
		if len(cmds[i]) == 4 && cmds[i][3] == "STABLE" && i+1 < len(cmds) {
			g = append(g, cmds[i+1])
			i++
		}
		groups = append(groups, g)
	}
	return a.spreadGroups(ctx, n, step, groups)
}

// multiSpread is multi with the commands split over setslotConns dedicated connections. Only
// for commands whose relative order does not matter (SETSLOT of distinct slots).
func (a *Admin) multiSpread(ctx context.Context, n model.Node, step string, cmds [][]string) error {
	if len(cmds) <= 8 {
		_, err := a.multi(ctx, n, step, cmds)
		return err
	}
	groups := make([][][]string, len(cmds))
	for i, c := range cmds {
		groups[i] = [][]string{c}
	}
	return a.spreadGroups(ctx, n, step, groups)
}

// spreadGroups sends groups of commands over up to setslotConns dedicated connections; the
// commands of one group stay together and in order on one connection.
func (a *Admin) spreadGroups(ctx context.Context, n model.Node, step string, groups [][][]string) error {
	if len(groups) == 0 {
		return nil
	}
	c, err := a.client(n.Addr)
	if err != nil {
		return model.NewOpError(n.Name, step, fmt.Errorf("%w: %v", model.ErrUnreachable, err))
	}
	parts := min(setslotConns, len(groups))
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		var group [][]string
		for _, g := range groups[p*len(groups)/parts : (p+1)*len(groups)/parts] {
			group = append(group, g...)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[p] = c.Dedicated(func(dc valkey.DedicatedClient) error {
				built := make(valkey.Commands, len(group))
				for i, args := range group {
					built[i] = dc.B().Arbitrary(args...).Build()
				}
				for _, r := range dc.DoMulti(ctx, built...) {
					if err := r.Error(); err != nil {
						return err
					}
				}
				return nil
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return model.NewOpError(n.Name, step, err)
	}
	return nil
}

// parallel runs fn for every node concurrently and joins the errors.
func parallel(nodes []model.Node, fn func(model.Node) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitFor polls cond until it reports true, ctx ends or timeout passes. The last condition
// error is wrapped into model.ErrNotConverged so callers see why it did not converge.
func (a *Admin) waitFor(ctx context.Context, step string, timeout time.Duration, cond func() (bool, error)) error {
	start := time.Now()
	deadline := start.Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			a.logf("%s: done after %s", step, time.Since(start).Round(time.Millisecond))
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			return model.NewOpError("", step, fmt.Errorf("%w within %s (last: %v)", model.ErrNotConverged, timeout, last))
		}
		select {
		case <-ctx.Done():
			return model.NewOpError("", step, fmt.Errorf("%w (last: %v)", ctx.Err(), last))
		case <-time.After(a.opts.Poll):
		}
	}
}

func (a *Admin) logf(format string, args ...any) {
	if a.opts.Log != nil {
		a.opts.Log(format, args...)
	}
}

func (a *Admin) remap(announced string) string {
	if a.opts.Remap == nil {
		return announced
	}
	return a.opts.Remap(announced)
}

package valkeyops

import (
	"context"
	"errors"
	"sync"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

var (
	errAdminClosed = errors.New("admin closed")
	errPoolClosed  = errors.New("pool closed")
)

// Pool keeps one Admin per key (for example one per cluster) and reuses it while the
// credentials stay the same, telling credentials apart by Credentials.Token. It is safe for
// concurrent use.
type Pool struct {
	remap func(string) string
	log   func(format string, args ...any)

	mu     sync.Mutex
	admins map[string]pooled
	closed bool
}

type pooled struct {
	token string
	admin *Admin
}

// NewPool returns an empty pool whose Admins use remap and log (both may be nil; see Options).
func NewPool(remap func(string) string, log func(format string, args ...any)) *Pool {
	return &Pool{remap: remap, log: log, admins: map[string]pooled{}}
}

// Connect returns the Admin for key. The pooled one is reused when it was made from
// credentials with the same Token; otherwise it is closed (its connections dropped) and a new
// one is made from c (if c is invalid, the error is returned and key has no Admin until the
// next successful Connect). Connections are dialed lazily by the Admin's operations.
func (p *Pool) Connect(ctx context.Context, key string, c Credentials) (*Admin, error) {
	if err := ctx.Err(); err != nil {
		return nil, model.NewOpError(key, "connect", err)
	}
	token := c.Token()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, model.NewOpError(key, "connect", errPoolClosed)
	}
	old, ok := p.admins[key]
	if ok && old.token == token {
		return old.admin, nil
	}
	if ok {
		old.admin.Close()
		delete(p.admins, key)
		p.logf("valkeyops pool: credentials of %s changed, reconnecting", key)
	}
	adm, err := NewAdmin(Options{Credentials: c, Remap: p.remap, Log: p.log})
	if err != nil {
		return nil, err
	}
	p.admins[key] = pooled{token: token, admin: adm}
	return adm, nil
}

// Release closes and forgets the Admin for key (for example when its cluster is deleted).
func (p *Pool) Release(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.admins[key]; ok {
		e.admin.Close()
		delete(p.admins, key)
	}
}

// Close closes every Admin; later Connect calls fail.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for k, e := range p.admins {
		e.admin.Close()
		delete(p.admins, k)
	}
}

func (p *Pool) logf(format string, args ...any) {
	if p.log != nil {
		p.log(format, args...)
	}
}

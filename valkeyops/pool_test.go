package valkeyops

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

func isClosed(a *Admin) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

func TestPoolConnect(t *testing.T) {
	ctx := context.Background()
	creds := Credentials{Username: model.OperatorUser, Password: "pw"}
	rotated := creds
	rotated.Password = "pw2"

	tests := []struct {
		name      string
		key       string
		c         Credentials
		wantSame  bool // the Admin of the first Connect is returned
		wantFirst bool // the first Admin is still open afterwards
	}{
		{name: "same key, same credentials", key: "ns/a", c: creds, wantSame: true, wantFirst: true},
		{name: "same key, changed credentials", key: "ns/a", c: rotated},
		{name: "another key", key: "ns/b", c: creds, wantFirst: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs []string
			p := NewPool(nil, func(f string, _ ...any) { logs = append(logs, f) })
			defer p.Close()
			first, err := p.Connect(ctx, "ns/a", creds)
			require.NoError(t, err)
			second, err := p.Connect(ctx, tt.key, tt.c)
			require.NoError(t, err)
			assert.Equal(t, tt.wantSame, first == second)
			assert.Equal(t, !tt.wantFirst, isClosed(first))
			assert.False(t, isClosed(second))
			for _, l := range logs {
				assert.NotContains(t, l, "pw")
			}
		})
	}
}

func TestPoolPassesRemapAndLog(t *testing.T) {
	remap := func(s string) string { return "remapped:" + s }
	var logged bool
	p := NewPool(remap, func(string, ...any) { logged = true })
	defer p.Close()
	a, err := p.Connect(context.Background(), "k", Credentials{Password: "pw"})
	require.NoError(t, err)
	assert.Equal(t, "remapped:x", a.remap("x"))
	a.logf("hello")
	assert.True(t, logged)
}

func TestPoolConnectInvalidCredentials(t *testing.T) {
	p := NewPool(nil, nil)
	defer p.Close()
	ctx := context.Background()
	good, err := p.Connect(ctx, "k", Credentials{Password: "pw"})
	require.NoError(t, err)

	_, err = p.Connect(ctx, "k", Credentials{})
	assert.ErrorIs(t, err, model.ErrAuthRequired)
	assert.True(t, isClosed(good), "the Admin of outdated credentials is closed")

	_, err = p.Connect(ctx, "k", Credentials{Password: "pw", CA: []byte("junk"), ServerName: "s"})
	assert.ErrorIs(t, err, model.ErrInvalidSpec)

	again, err := p.Connect(ctx, "k", Credentials{Password: "pw"})
	require.NoError(t, err)
	assert.NotSame(t, good, again)
}

func TestPoolReleaseAndClose(t *testing.T) {
	ctx := context.Background()
	c := Credentials{Password: "pw"}
	p := NewPool(nil, nil)
	a, err := p.Connect(ctx, "a", c)
	require.NoError(t, err)
	b, err := p.Connect(ctx, "b", c)
	require.NoError(t, err)

	p.Release("a")
	p.Release("missing")
	assert.True(t, isClosed(a))
	assert.False(t, isClosed(b))
	a2, err := p.Connect(ctx, "a", c)
	require.NoError(t, err)
	assert.NotSame(t, a, a2)

	p.Close()
	assert.True(t, isClosed(a2))
	assert.True(t, isClosed(b))
	_, err = p.Connect(ctx, "a", c)
	assert.Error(t, err)

	_, err = a2.client("127.0.0.1:1")
	assert.ErrorIs(t, err, errAdminClosed, "a closed Admin does not dial again")
}

func TestPoolConnectCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := NewPool(nil, nil)
	defer p.Close()
	_, err := p.Connect(ctx, "k", Credentials{Password: "pw"})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestPoolConcurrent(t *testing.T) {
	p := NewPool(nil, nil)
	defer p.Close()
	ctx := context.Background()
	const n = 32
	got := make([]*Admin, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := p.Connect(ctx, "k", Credentials{Password: "pw"})
			assert.NoError(t, err)
			got[i] = a
			if i%4 == 0 {
				p.Release("other")
			}
		}()
	}
	wg.Wait()
	for _, a := range got {
		assert.Same(t, got[0], a)
	}
}

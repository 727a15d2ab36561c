package promscrape_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/promscrape"
)

// TestGet: a text exposition is parsed into families whose series are found by a subset of
// their labels; a missing family or series is reported as not found, and an endpoint that
// fails or serves something else is an error.
func TestGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "# TYPE redis_up gauge\nredis_up 1\n"+
			"# TYPE redis_db_keys gauge\nredis_db_keys{db=\"db0\"} 7\nredis_db_keys{db=\"db1\"} 2\n"+
			"# TYPE redis_commands_total counter\nredis_commands_total{cmd=\"get\"} 3\n"+
			"untyped_thing{a=\"b\",role=\"master\"} 1\n")
	}))
	defer srv.Close()

	m, err := promscrape.Get(context.Background(), srv.URL+"/metrics")
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
		found  bool
	}{
		{"redis_up", nil, 1, true},
		{"redis_db_keys", map[string]string{"db": "db1"}, 2, true},
		{"redis_db_keys", map[string]string{"db": "db9"}, 0, false},
		{"redis_commands_total", map[string]string{"cmd": "get"}, 3, true},
		{"untyped_thing", map[string]string{"role": "master"}, 1, true},
		{"absent", nil, 0, false},
	} {
		got, found := m.Value(tc.name, tc.labels)
		assert.Equal(t, tc.found, found, "%s%v", tc.name, tc.labels)
		assert.Equal(t, tc.want, got, "%s%v", tc.name, tc.labels)
	}
	assert.Len(t, m.Samples("redis_db_keys"), 2)

	_, err = promscrape.Get(context.Background(), srv.URL+"/other")
	assert.Error(t, err, "a 404 is an error")
}

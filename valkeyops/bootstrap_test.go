package valkeyops

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// A fresh node is lowered only when its configured timeout is known and higher than the one
// it forms at; only a new cluster's nodes turn replica failover off.
func TestPrepareFresh(t *testing.T) {
	base := [][]string{
		{"CLUSTER", "SET-CONFIG-EPOCH", "7"},
		{"CONFIG", "SET", "repl-diskless-sync-delay", "0"},
	}
	for _, tc := range []struct {
		name       string
		configured int
		forming    bool
		want       []string // the CONFIG SET appended to base, nil = none
	}{
		{"new cluster", 3000, true, []string{"CONFIG", "SET", "cluster-node-timeout", strconv.Itoa(formingNodeTimeout), "cluster-replica-no-failover", "yes"}},
		{"joining a formed cluster", 3000, false, []string{"CONFIG", "SET", "cluster-node-timeout", strconv.Itoa(joiningNodeTimeout)}},
		{"configured timeout unknown", 0, true, nil},
		{"configured at the forming timeout already", formingNodeTimeout, true, nil},
		{"configured below the joining timeout", joiningNodeTimeout - 1, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := base
			if tc.want != nil {
				want = append(append([][]string(nil), base...), tc.want)
			}
			assert.Equal(t, want, prepareFresh(model.Node{Name: "n", NodeTimeoutMillis: tc.configured}, 7, tc.forming))
		})
	}
}

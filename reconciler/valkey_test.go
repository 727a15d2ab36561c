package reconciler_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

// TestNoPasswordNoConnection: the production boundary refuses to build a client without the
// operator's password, before anything is dialled (auth is mandatory).
func TestNoPasswordNoConnection(t *testing.T) {
	pool := valkeyops.NewPool(nil, nil)
	defer pool.Close()
	v := reconciler.PoolValkey{Pool: pool}
	c, err := v.Connect(context.Background(), types.NamespacedName{Namespace: "n", Name: "c"},
		valkeyops.Credentials{Username: model.OperatorUser})
	require.Error(t, err, "auth is mandatory")
	assert.True(t, errors.Is(err, model.ErrAuthRequired), "typed error, got %v", err)
	assert.Nil(t, c, "no servers to reach")
}

// TestPlannerLifecyclesAreTheNodeLifecycles: the pure planner spells ValkeyNode lifecycles
// itself (it imports no Kubernetes view); they must stay the strings the views store.
func TestPlannerLifecyclesAreTheNodeLifecycles(t *testing.T) {
	assert.Equal(t, []string{views.LifecycleJoining, views.LifecycleActive, views.LifecycleLeaving},
		[]string{plan.Joining, plan.Active, plan.Leaving})
}

package dockerpods

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

const inSync corev1.PodConditionType = "valkey.gomomento.com/in-sync"

func cond(t corev1.PodConditionType, s corev1.ConditionStatus) corev1.PodCondition {
	return corev1.PodCondition{Type: t, Status: s}
}

func gates(types ...corev1.PodConditionType) []corev1.PodReadinessGate {
	var out []corev1.PodReadinessGate
	for _, t := range types {
		out = append(out, corev1.PodReadinessGate{ConditionType: t})
	}
	return out
}

// Ready is a kubelet's: ContainersReady, and then every readiness gate's
// condition present and True.
func TestPodReadyCondition(t *testing.T) {
	ctrsReady := cond(corev1.ContainersReady, corev1.ConditionTrue)
	ctrsNotReady := containersReadyCondition(corev1.PodRunning, []corev1.ContainerStatus{{Name: "valkey"}, {Name: "sidecar", Ready: true}})
	const other corev1.PodConditionType = "example.com/other"
	tests := []struct {
		name            string
		gates           []corev1.PodReadinessGate
		containersReady corev1.PodCondition
		conds           []corev1.PodCondition
		want            corev1.PodCondition
	}{{
		name:            "no gates: Ready follows the containers",
		containersReady: ctrsReady,
		want:            cond(corev1.PodReady, corev1.ConditionTrue),
	}, {
		name:            "gates all True",
		gates:           gates(inSync, other),
		containersReady: ctrsReady,
		conds:           []corev1.PodCondition{cond(other, corev1.ConditionTrue), cond(inSync, corev1.ConditionTrue)},
		want:            cond(corev1.PodReady, corev1.ConditionTrue),
	}, {
		name:            "one gate missing",
		gates:           gates(inSync, other),
		containersReady: ctrsReady,
		conds:           []corev1.PodCondition{cond(other, corev1.ConditionTrue)},
		want: corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady",
			Message: `corresponding condition of pod readiness gate "valkey.gomomento.com/in-sync" does not exist.`},
	}, {
		name:            "one gate False",
		gates:           gates(inSync, other),
		containersReady: ctrsReady,
		conds:           []corev1.PodCondition{cond(inSync, corev1.ConditionFalse), cond(other, corev1.ConditionTrue)},
		want: corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady",
			Message: `the status of pod readiness gate "valkey.gomomento.com/in-sync" is not "True", but False`},
	}, {
		name:            "both gates not True are named",
		gates:           gates(inSync, other),
		containersReady: ctrsReady,
		conds:           []corev1.PodCondition{cond(other, corev1.ConditionUnknown)},
		want: corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady",
			Message: `corresponding condition of pod readiness gate "valkey.gomomento.com/in-sync" does not exist., ` +
				`the status of pod readiness gate "example.com/other" is not "True", but Unknown`},
	}, {
		name:            "containers not ready, gates True: the containers' reason",
		gates:           gates(inSync),
		containersReady: ctrsNotReady,
		conds:           []corev1.PodCondition{cond(inSync, corev1.ConditionTrue)},
		want: corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady",
			Message: "containers with unready status: [valkey]"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, podReadyCondition(tt.gates, tt.containersReady, tt.conds))
		})
	}
}

func TestContainersReadyCondition(t *testing.T) {
	tests := []struct {
		name     string
		phase    corev1.PodPhase
		statuses []corev1.ContainerStatus
		want     corev1.PodCondition
	}{
		{"all ready", corev1.PodRunning, []corev1.ContainerStatus{{Name: "a", Ready: true}, {Name: "b", Ready: true}},
			cond(corev1.ContainersReady, corev1.ConditionTrue)},
		{"unready ones named", corev1.PodRunning, []corev1.ContainerStatus{{Name: "a"}, {Name: "b", Ready: true}, {Name: "c"}},
			corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [a c]"}},
		{"no statuses yet", corev1.PodPending, nil,
			corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "UnknownContainerStatuses"}},
		{"succeeded", corev1.PodSucceeded, []corev1.ContainerStatus{{Name: "a"}},
			corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "PodCompleted"}},
		{"failed", corev1.PodFailed, []corev1.ContainerStatus{{Name: "a", Ready: true}},
			corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "PodFailed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, containersReadyCondition(tt.phase, tt.statuses))
		})
	}
}

// The conditions the kubelet does not own are kept as the API server has
// them; the kubelet's own come from the provider.
func TestWithForeignConditions(t *testing.T) {
	disruption := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"}
	tests := []struct {
		name     string
		own, api []corev1.PodCondition
		want     []corev1.PodCondition
	}{{
		name: "foreign conditions preserved after the kubelet's",
		own:  []corev1.PodCondition{cond(corev1.ContainersReady, corev1.ConditionTrue), cond(corev1.PodReady, corev1.ConditionTrue)},
		api:  []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionFalse), cond(inSync, corev1.ConditionTrue), disruption},
		want: []corev1.PodCondition{cond(corev1.ContainersReady, corev1.ConditionTrue), cond(corev1.PodReady, corev1.ConditionTrue),
			cond(inSync, corev1.ConditionTrue), disruption},
	}, {
		name: "the provider's stale copy of a foreign condition loses to the API's",
		own:  []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionFalse), cond(inSync, corev1.ConditionFalse)},
		api:  []corev1.PodCondition{cond(inSync, corev1.ConditionTrue)},
		want: []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionFalse), cond(inSync, corev1.ConditionTrue)},
	}, {
		name: "a foreign condition gone from the API is not revived",
		own:  []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionTrue), disruption},
		api:  []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionTrue)},
		want: []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionTrue)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, withForeignConditions(tt.own, tt.api))
		})
	}
}

// A status write carries the API copy's foreign conditions under that copy's
// resourceVersion, so that it fails rather than overwrite a newer one.
func TestStatusToWrite(t *testing.T) {
	mine := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1", ResourceVersion: "10"},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionFalse)}}}
	api := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1", ResourceVersion: "12"},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionTrue), cond(inSync, corev1.ConditionTrue)}}}
	tests := []struct {
		name      string
		pod, api  *corev1.Pod
		wantRV    string
		wantConds []corev1.PodCondition
	}{
		{"merged under the API copy's version", mine, api, "12",
			[]corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionFalse), cond(inSync, corev1.ConditionTrue)}},
		{"no API copy: as published", mine, nil, "10", mine.Status.Conditions},
		{"another pod of that name: as published", mine, withUID(api, "u2"), "10", mine.Status.Conditions},
		{"unconditional write stays unconditional", withRV(mine, ""), api, "",
			[]corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionFalse), cond(inSync, corev1.ConditionTrue)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.pod.DeepCopy()
			got := statusToWrite(tt.pod, tt.api)
			assert.Equal(t, tt.wantRV, got.ResourceVersion)
			assert.Equal(t, tt.wantConds, got.Status.Conditions)
			assert.Equal(t, before, tt.pod, "the published pod is not modified")
		})
	}
}

func withUID(p *corev1.Pod, uid string) *corev1.Pod {
	out := p.DeepCopy()
	out.UID = types.UID(uid)
	return out
}

func withRV(p *corev1.Pod, rv string) *corev1.Pod {
	out := p.DeepCopy()
	out.ResourceVersion = rv
	return out
}

// The provider reports the gate conditions the API server has, computes
// Ready from them, and learns of a change to them through refreshForeign
// (what WatchPods calls on an informer update), reporting a change only
// when its status really changed.
func TestRefreshForeignRecomputesReady(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "valkey"}}, ReadinessGates: gates(inSync)},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, corev1.ConditionTrue), cond(corev1.DisruptionTarget, corev1.ConditionTrue)}},
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	p := &Provider{apiPods: corev1listers.NewPodLister(idx)}
	st := newPodState("ns/p", pod.DeepCopy(), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.1"), t.TempDir())
	st.update(func() {
		st.ctrs[0].state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		st.ctrs[0].started, st.ctrs[0].ready = true, true
	})

	status := func() (ready, ctrsReady, gate corev1.PodCondition, disruption *corev1.PodCondition) {
		s := st.snapshot().Status
		require.NotNil(t, findCondition(s.Conditions, corev1.PodReady))
		require.NotNil(t, findCondition(s.Conditions, corev1.ContainersReady))
		gate = corev1.PodCondition{}
		if g := findCondition(s.Conditions, inSync); g != nil {
			gate = *g
		}
		return *findCondition(s.Conditions, corev1.PodReady), *findCondition(s.Conditions, corev1.ContainersReady), gate,
			findCondition(s.Conditions, corev1.DisruptionTarget)
	}
	ready, ctrsReady, _, disruption := status()
	assert.Equal(t, corev1.ConditionTrue, ctrsReady.Status)
	assert.Equal(t, corev1.ConditionFalse, ready.Status, "no gate condition yet")
	assert.Equal(t, "ReadinessGatesNotReady", ready.Reason)
	require.NotNil(t, disruption, "foreign condition from the pod as created is reported")

	steps := []struct {
		name        string
		api         []corev1.PodCondition
		wantChanged bool
		wantReady   corev1.ConditionStatus
	}{
		{"gate set True", []corev1.PodCondition{cond(inSync, corev1.ConditionTrue), cond(corev1.DisruptionTarget, corev1.ConditionTrue)}, true, corev1.ConditionTrue},
		{"same again (the provider's own write echoed)", []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionTrue), cond(inSync, corev1.ConditionTrue), cond(corev1.DisruptionTarget, corev1.ConditionTrue)}, false, corev1.ConditionTrue},
		{"gate set False", []corev1.PodCondition{cond(inSync, corev1.ConditionFalse), cond(corev1.DisruptionTarget, corev1.ConditionTrue)}, true, corev1.ConditionFalse},
	}
	for _, s := range steps {
		api := pod.DeepCopy()
		api.Status.Conditions = s.api
		require.NoError(t, idx.Update(api))
		assert.Equal(t, s.wantChanged, p.refreshForeign(st), s.name)
		ready, _, gate, disruption := status()
		assert.Equal(t, s.wantReady, ready.Status, s.name)
		assert.Equal(t, findCondition(s.api, inSync).Status, gate.Status, "%s: the gate condition is reported as the API has it", s.name)
		assert.NotNil(t, disruption, s.name)
	}
}

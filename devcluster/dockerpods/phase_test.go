package dockerpods

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Container statuses for the tables below.
func waitingCS(name, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

func runningCS(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func exitedCS(name string, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
}

// backingOffCS waits in CrashLoopBackOff after exiting with code.
func backingOffCS(name string, code int32) corev1.ContainerStatus {
	s := waitingCS(name, "CrashLoopBackOff")
	s.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}
	return s
}

func cs(s ...corev1.ContainerStatus) []corev1.ContainerStatus { return s }

func TestPodPhaseWithInitContainers(t *testing.T) {
	app := waitingCS("app", reasonPodInitializing)
	for _, c := range []struct {
		name       string
		policy     corev1.RestartPolicy
		deleting   bool
		appStarted bool
		inits      []corev1.ContainerStatus
		ctrs       []corev1.ContainerStatus
		want       corev1.PodPhase
	}{
		{"first init container runs", corev1.RestartPolicyNever, false, false,
			cs(runningCS("a"), waitingCS("b", reasonPodInitializing)), cs(app), corev1.PodPending},
		{"second still to run", corev1.RestartPolicyNever, false, false,
			cs(exitedCS("a", 0), waitingCS("b", reasonPodInitializing)), cs(app), corev1.PodPending},
		{"failed under Never fails the pod", corev1.RestartPolicyNever, false, false,
			cs(exitedCS("a", 0), exitedCS("b", 7)), cs(app), corev1.PodFailed},
		{"failed under OnFailure waits to be retried", corev1.RestartPolicyOnFailure, false, false,
			cs(backingOffCS("a", 7)), cs(app), corev1.PodPending},
		{"failed under Always waits to be retried", corev1.RestartPolicyAlways, false, false,
			cs(backingOffCS("a", 7)), cs(app), corev1.PodPending},
		{"retried and running again", corev1.RestartPolicyOnFailure, false, false,
			cs(runningCS("a")), cs(app), corev1.PodPending},
		{"deleted while an init container runs", corev1.RestartPolicyAlways, true, false,
			cs(runningCS("a")), cs(app), corev1.PodPending},
		{"deleted, the init container stopped", corev1.RestartPolicyAlways, true, false,
			cs(exitedCS("a", 143)), cs(app), corev1.PodFailed},
		{"initialized, app container being created", corev1.RestartPolicyNever, false, false,
			cs(exitedCS("a", 0), exitedCS("b", 0)), cs(waitingCS("app", "ContainerCreating")), corev1.PodPending},
		{"initialized, app container runs", corev1.RestartPolicyNever, false, true,
			cs(exitedCS("a", 0), exitedCS("b", 0)), cs(runningCS("app")), corev1.PodRunning},
		{"initialized, app container completed", corev1.RestartPolicyNever, false, true,
			cs(exitedCS("a", 0)), cs(exitedCS("app", 0)), corev1.PodSucceeded},
		{"initialized, app container failed", corev1.RestartPolicyNever, false, true,
			cs(exitedCS("a", 0)), cs(exitedCS("app", 1)), corev1.PodFailed},
		{"no init containers: between restarts", corev1.RestartPolicyAlways, false, true,
			nil, cs(backingOffCS("app", 1)), corev1.PodRunning},
		{"no init containers: app container being created", corev1.RestartPolicyAlways, false, false,
			nil, cs(waitingCS("app", "ContainerCreating")), corev1.PodPending},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, podPhase(c.policy, c.deleting, c.appStarted, c.inits, c.ctrs))
		})
	}
}

func TestInitializedCondition(t *testing.T) {
	app := waitingCS("app", reasonPodInitializing)
	notInit := func(msg string) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, Reason: reasonContainersNotInitialized, Message: msg}
	}
	initialized := corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}
	for _, c := range []struct {
		name  string
		phase corev1.PodPhase
		inits []corev1.ContainerStatus
		ctrs  []corev1.ContainerStatus
		want  corev1.PodCondition
	}{
		{"no init containers", corev1.PodRunning, nil, cs(runningCS("app")), initialized},
		{"none run yet", corev1.PodPending, cs(waitingCS("a", reasonPodInitializing), waitingCS("b", reasonPodInitializing)), cs(app),
			notInit("containers with incomplete status: [a b]")},
		{"first done, second runs", corev1.PodPending, cs(exitedCS("a", 0), runningCS("b")), cs(app),
			notInit("containers with incomplete status: [b]")},
		{"second failed", corev1.PodFailed, cs(exitedCS("a", 0), exitedCS("b", 7)), cs(app),
			notInit("containers with incomplete status: [b]")},
		{"second backing off", corev1.PodPending, cs(exitedCS("a", 0), backingOffCS("b", 7)), cs(app),
			notInit("containers with incomplete status: [b]")},
		{"all completed", corev1.PodPending, cs(exitedCS("a", 0), exitedCS("b", 0)), cs(waitingCS("app", "ContainerCreating")), initialized},
		{"pod completed", corev1.PodSucceeded, cs(exitedCS("a", 0)), cs(exitedCS("app", 0)),
			corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, Reason: reasonPodCompleted}},
		{"an app container started: initialized once, initialized for good", corev1.PodRunning, cs(waitingCS("a", reasonPodInitializing)), cs(runningCS("app")), initialized},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, initializedCondition(c.phase, c.inits, c.ctrs))
		})
	}
}

func TestShouldRestart(t *testing.T) {
	for _, c := range []struct {
		policy   corev1.RestartPolicy
		init     bool
		code     int32
		deleting bool
		want     bool
	}{
		{corev1.RestartPolicyNever, true, 1, false, false},
		{corev1.RestartPolicyOnFailure, true, 1, false, true},
		{corev1.RestartPolicyAlways, true, 1, false, true},
		{corev1.RestartPolicyAlways, true, 0, false, false}, // an init container that completed is done
		{corev1.RestartPolicyOnFailure, true, 1, true, false},
		{corev1.RestartPolicyNever, false, 1, false, false},
		{corev1.RestartPolicyOnFailure, false, 1, false, true},
		{corev1.RestartPolicyOnFailure, false, 0, false, false},
		{corev1.RestartPolicyAlways, false, 0, false, true},
		{"", false, 0, false, true}, // the API's default is Always
		{corev1.RestartPolicyAlways, false, 1, true, false},
	} {
		assert.Equal(t, c.want, shouldRestart(c.policy, c.init, c.code, c.deleting), "%+v", c)
	}
}

func TestSidecarsAreRefused(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "fetch"}, {Name: "proxy", RestartPolicy: &always}}}}
	err := unsupported(pod)
	var unsup *UnsupportedError
	require.True(t, errors.As(err, &unsup), "%v", err)
	assert.Contains(t, unsup.Error(), `init container "proxy" has restartPolicy Always`)

	pod.Spec.InitContainers = pod.Spec.InitContainers[:1]
	assert.NoError(t, unsupported(pod), "plain init containers run")
}

func TestInitializedBefore(t *testing.T) {
	spec := corev1.PodSpec{InitContainers: []corev1.Container{{Name: "a"}, {Name: "b"}}}
	for _, c := range []struct {
		name     string
		statuses []corev1.ContainerStatus
		want     []string // names of the states kept, nil for none
	}{
		{"new pod", nil, nil},
		{"all completed", cs(exitedCS("a", 0), exitedCS("b", 0)), []string{"a", "b"}},
		{"all completed, listed in another order", cs(exitedCS("b", 0), exitedCS("a", 0)), []string{"a", "b"}},
		{"second still running", cs(exitedCS("a", 0), runningCS("b")), nil},
		{"second failed", cs(exitedCS("a", 0), exitedCS("b", 2)), nil},
		{"second missing", cs(exitedCS("a", 0)), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := initializedBefore(&corev1.Pod{Spec: spec, Status: corev1.PodStatus{InitContainerStatuses: c.statuses}})
			var names []string
			for _, s := range got {
				names = append(names, s.Name)
			}
			assert.Equal(t, c.want, names)
		})
	}
}

// TestPodStateReportsInitContainers checks the status a pod with init
// containers starts with, and the one it gets back when the nodes process
// restarts after it was initialized.
func TestPodStateReportsInitContainers(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec: corev1.PodSpec{
			RestartPolicy:  corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: "a", Image: "img:a"}, {Name: "b", Image: "img:b"}},
			Containers:     []corev1.Container{{Name: "app", Image: "img:app"}},
		},
	}
	addr := netip.MustParseAddr("10.0.0.5")
	st := newPodState("ns/p", pod.DeepCopy(), addr, addr, t.TempDir())
	s := st.snapshot().Status
	assert.Equal(t, corev1.PodPending, s.Phase)
	require.Len(t, s.InitContainerStatuses, 2)
	for _, c := range append(s.InitContainerStatuses, s.ContainerStatuses...) {
		assert.Equal(t, reasonPodInitializing, c.State.Waiting.Reason, c.Name)
		assert.False(t, c.Ready, c.Name)
	}
	assert.Equal(t, "img:b", s.InitContainerStatuses[1].Image)
	cond := findCondition(s.Conditions, corev1.PodInitialized)
	require.NotNil(t, cond)
	assert.Equal(t, corev1.ConditionFalse, cond.Status)
	assert.Equal(t, "containers with incomplete status: [a b]", cond.Message)
	assert.Equal(t, corev1.ConditionFalse, findCondition(s.Conditions, corev1.PodReadyToStartContainers).Status)

	started := metav1.Now()
	api := corev1.PodStatus{StartTime: &started, InitContainerStatuses: cs(exitedCS("a", 0), exitedCS("b", 0))}
	api.InitContainerStatuses[0].RestartCount = 2
	st = newPodState("ns/p", pod.DeepCopy(), addr, addr, t.TempDir())
	st.keepInitialized(api)
	s = st.snapshot().Status
	assert.Equal(t, corev1.PodPending, s.Phase, "the app container is still to start")
	assert.Equal(t, corev1.ConditionTrue, findCondition(s.Conditions, corev1.PodInitialized).Status)
	assert.True(t, s.InitContainerStatuses[0].Ready && s.InitContainerStatuses[1].Ready, "completed init containers are ready")
	assert.Equal(t, int32(2), s.InitContainerStatuses[0].RestartCount, "restarts carried over")
	assert.Equal(t, "ContainerCreating", s.ContainerStatuses[0].State.Waiting.Reason)
	assert.Equal(t, &started, s.StartTime)
	assert.Equal(t, corev1.ConditionTrue, findCondition(s.Conditions, corev1.PodReadyToStartContainers).Status)
}

//go:build envtest

package devcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gomomento/valkey-operator/devcluster/devtest"
	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/devcluster/testimage"
)

// TestDevClusterRunsPreStopHooks deletes pods whose container has a preStop
// hook and checks the dev kubelet runs it before SIGTERM, as a kubelet does:
// a sleep hook holds SIGTERM back for its duration while the container keeps
// serving, and a failing exec hook runs in the container and does not stop
// the deletion. devpod exits 0 on SIGTERM, so the container's die event
// tells SIGTERM (exit 0) from SIGKILL (137).
func TestDevClusterRunsPreStopHooks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	image, err := testimage.Ensure(ctx)
	require.NoError(t, err)
	env := devtest.Start(t, devtest.Options{ValkeyImage: image})
	kube := env.Kube
	docker, err := dockernet.NewClient()
	require.NoError(t, err)
	defer docker.Close()
	ns := "default"

	const sleepSeconds = 3
	sleeper := hookedPod("sleeper", &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: sleepSeconds}})
	execer := hookedPod("execer", &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/devpod", "exit", "7"}}})
	for _, p := range []*corev1.Pod{sleeper, execer} {
		_, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	ips := map[string]string{}
	for _, name := range []string{sleeper.Name, execer.Name} {
		ips[name] = waitRunningReady(ctx, t, kube, ns, name)
	}

	// deleteAndWatch deletes the pod and returns when it is gone, with its
	// container's events (die and exec_die) from the delete on, and the time
	// the delete was sent.
	deleteAndWatch := func(t *testing.T, name string, whileHook func(deleted time.Time)) ([]dockerEvent, time.Time) {
		id, filter := podContainer(ctx, t, env, docker, ns, name)
		evCtx, stopEvents := context.WithTimeout(ctx, time.Minute)
		defer stopEvents()
		events := docker.Events(evCtx, client.EventsListOptions{Filters: make(client.Filters).
			Add("type", "container").Add("container", id).Add("event", "die").Add("event", "exec_die")})

		deleted := time.Now()
		require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}))
		if whileHook != nil {
			whileHook(deleted)
		}
		var seen []dockerEvent
		for done := false; !done; {
			select {
			case m := <-events.Messages:
				e := dockerEvent{action: string(m.Action), exitCode: m.Actor.Attributes["exitCode"], at: time.Unix(0, m.TimeNano)}
				seen = append(seen, e)
				t.Logf("%s: %s exitCode=%s %.2fs after the delete", name, e.action, e.exitCode, e.at.Sub(deleted).Seconds())
				done = e.action == "die"
			case err := <-events.Err:
				t.Fatalf("no die event for container %s: %v (events so far %v)", id, err, seen)
			}
		}
		waitPodAndContainerGone(ctx, t, kube, docker, filter, ns, name)
		t.Logf("figure: %s deleted and its container removed %.2fs after the delete", name, time.Since(deleted).Seconds())
		return seen, deleted
	}

	t.Run("sleep hook holds SIGTERM back", func(t *testing.T) {
		events, deleted := deleteAndWatch(t, sleeper.Name, func(deleted time.Time) {
			// SIGTERM cannot come before the hook's 3 s, which start after
			// the delete: a request answered within them reached the still
			// running container.
			got, err := ask(ips[sleeper.Name], "ID")
			answered := time.Since(deleted)
			t.Logf("container answered %q (err %v) %.2fs after the delete", got, err, answered.Seconds())
			if answered < sleepSeconds*time.Second {
				assert.NoError(t, err, "the container serves while its preStop hook runs")
			}
			p, err := kube.CoreV1().Pods(ns).Get(ctx, sleeper.Name, metav1.GetOptions{})
			if err == nil && time.Since(deleted) < sleepSeconds*time.Second {
				assert.NotNil(t, p.DeletionTimestamp)
				require.Len(t, p.Status.ContainerStatuses, 1)
				assert.NotNil(t, p.Status.ContainerStatuses[0].State.Running, "still running during the hook")
				// A kubelet keeps probing readiness during termination; devpod
				// still listens, so the pod stays Ready until SIGTERM.
				assert.True(t, podCondition(p, corev1.PodReady), "Ready follows the readiness probe during the hook")
				t.Logf("during the hook: phase %s, Ready %v", p.Status.Phase, podCondition(p, corev1.PodReady))
			}
		})
		require.NotEmpty(t, events)
		die := events[len(events)-1]
		assert.Equal(t, "0", die.exitCode, "0 is devpod's answer to SIGTERM (137 would be SIGKILL)")
		assert.GreaterOrEqual(t, die.at.Sub(deleted), sleepSeconds*time.Second,
			"SIGTERM only after the %ds preStop sleep", sleepSeconds)
	})

	t.Run("failing exec hook runs, then SIGTERM", func(t *testing.T) {
		events, _ := deleteAndWatch(t, execer.Name, nil)
		require.Len(t, events, 2, "the hook's exec, then the container's end: %v", events)
		assert.Equal(t, dockerEvent{action: "exec_die", exitCode: "7"}, dockerEvent{action: events[0].action, exitCode: events[0].exitCode},
			"the hook ran in the container and failed")
		assert.Equal(t, "die", events[1].action)
		assert.Equal(t, "0", events[1].exitCode, "a failed hook is not fatal: SIGTERM follows")
	})
}

type dockerEvent struct {
	action, exitCode string
	at               time.Time
}

// hookedPod runs devpod (which exits 0 on SIGTERM) with a preStop hook.
func hookedPod(name string, preStop *corev1.LifecycleHandler) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: int64p(20),
			Containers: []corev1.Container{{
				Name: "main", Image: testimage.Image, Args: []string{"serve", "--port", "7000"},
				Lifecycle: &corev1.Lifecycle{PreStop: preStop},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(7000)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

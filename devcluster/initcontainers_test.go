//go:build envtest

package devcluster_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
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

// TestDevClusterRunsInitContainers checks the dev kubelet's init containers on one
// cluster: they run one at a time, in order, with the pod's volumes and downward-API env,
// before the app container, and report their states as a kubelet does; a failing one
// fails a restartPolicy Never pod with its exit code and no app container is ever
// created; under OnFailure a failed one is retried; a pod deleted while one runs goes
// away within its grace period with its containers.
func TestDevClusterRunsInitContainers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	image, err := testimage.Ensure(ctx)
	require.NoError(t, err)
	start := time.Now()
	env := devtest.Start(t, devtest.Options{Nodes: 1, ValkeyImage: image})
	t.Logf("cluster up in %.1fs", time.Since(start).Seconds())
	kube := env.Kube
	docker, err := dockernet.NewClient()
	require.NoError(t, err)
	defer docker.Close()
	ns := "default"

	t.Run("init containers run in order and share the pod's volumes", func(t *testing.T) {
		begin := time.Now()
		pod := initPod(image, "ordered", corev1.RestartPolicyNever,
			initContainer(image, "first", "append", "/work/log", "first"),
			// The second sees the pod's address through the downward API and $(VAR) expansion.
			initContainer(image, "second", "append", "/work/log", "second $(POD_IP)"))
		pod, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		ip := waitRunningReady(ctx, t, kube, ns, pod.Name)
		t.Logf("two init containers, then Running and Ready, %.1fs after create", time.Since(begin).Seconds())

		got, err := ask(ip, "CAT /work/log")
		require.NoError(t, err)
		assert.Equal(t, "first\nsecond "+ip+"\n", got, "the app container reads what both wrote, in order")

		p, err := kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Len(t, p.Status.InitContainerStatuses, 2)
		for i, name := range []string{"first", "second"} {
			s := p.Status.InitContainerStatuses[i]
			assert.Equal(t, name, s.Name)
			if assert.NotNil(t, s.State.Terminated, "%s terminated", name) {
				assert.Equal(t, int32(0), s.State.Terminated.ExitCode)
				assert.Equal(t, "Completed", s.State.Terminated.Reason)
			}
			assert.True(t, s.Ready, "a completed init container is ready")
			assert.NotEmpty(t, s.ContainerID)
		}
		second := p.Status.InitContainerStatuses[1].State.Terminated
		app := p.Status.ContainerStatuses[0].State.Running
		require.NotNil(t, app)
		assert.False(t, app.StartedAt.Before(&second.FinishedAt), "the app container started (%v) after the last init container ended (%v)", app.StartedAt, second.FinishedAt)
		assert.Equal(t, corev1.ConditionTrue, conditionStatus(p, corev1.PodInitialized))

		out := env.Kubectl(t, "logs", pod.Name, "-c", "first")
		assert.Equal(t, "appended \"first\" to /work/log\n", out, "kubectl logs -c <init container>")
		t.Logf("took %.1fs", time.Since(begin).Seconds())
	})

	t.Run("a failing init container fails a Never pod, no app container created", func(t *testing.T) {
		begin := time.Now()
		pod := initPod(image, "fails", corev1.RestartPolicyNever,
			initContainer(image, "breaks", "append", "/work/log", "breaks", "7"),
			initContainer(image, "never", "append", "/work/log", "never"))
		pod, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		p := awaitPod(ctx, t, kube, pod, 60*time.Second, "pod Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		t.Logf("Failed %.1fs after create", time.Since(begin).Seconds())

		require.Len(t, p.Status.InitContainerStatuses, 2)
		breaks := p.Status.InitContainerStatuses[0]
		if assert.NotNil(t, breaks.State.Terminated, "%+v", breaks.State) {
			assert.Equal(t, int32(7), breaks.State.Terminated.ExitCode)
			assert.Equal(t, "Error", breaks.State.Terminated.Reason)
		}
		assert.False(t, breaks.Ready)
		assert.Zero(t, breaks.RestartCount, "Never: not retried")
		for _, s := range []corev1.ContainerStatus{p.Status.InitContainerStatuses[1], p.Status.ContainerStatuses[0]} {
			if assert.NotNil(t, s.State.Waiting, "%s never ran", s.Name) {
				assert.Equal(t, "PodInitializing", s.State.Waiting.Reason, s.Name)
			}
		}
		init := findCondition(p, corev1.PodInitialized)
		require.NotNil(t, init)
		assert.Equal(t, corev1.ConditionFalse, init.Status)
		assert.Equal(t, "ContainersNotInitialized", init.Reason)
		assert.Equal(t, "containers with incomplete status: [breaks never]", init.Message)
		assert.Equal(t, []string{"breaks"}, podContainerNames(ctx, t, env, docker, p), "only the failed init container was ever created")
		t.Logf("took %.1fs", time.Since(begin).Seconds())
	})

	t.Run("a failed init container is retried under OnFailure", func(t *testing.T) {
		begin := time.Now()
		pod := initPod(image, "retried", corev1.RestartPolicyOnFailure, initContainer(image, "flaky", "fail-once", "/work/tried"))
		pod, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		waitRunningReady(ctx, t, kube, ns, pod.Name)
		t.Logf("Running %.1fs after create", time.Since(begin).Seconds())
		p, err := kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		require.NoError(t, err)
		s := p.Status.InitContainerStatuses[0]
		assert.Equal(t, int32(1), s.RestartCount)
		if assert.NotNil(t, s.LastTerminationState.Terminated) {
			assert.Equal(t, int32(1), s.LastTerminationState.Terminated.ExitCode, "the failed run is its last state")
		}
		if assert.NotNil(t, s.State.Terminated) {
			assert.Equal(t, "Completed", s.State.Terminated.Reason)
		}
		t.Logf("took %.1fs", time.Since(begin).Seconds())
	})

	t.Run("a pod deleted during a long init container goes within its grace period", func(t *testing.T) {
		begin := time.Now()
		const grace = 2
		pod := initPod(image, "slow", corev1.RestartPolicyNever, initContainer(image, "slow", "sleep", "600"))
		pod.Spec.TerminationGracePeriodSeconds = int64p(grace)
		pod, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		p := awaitPod(ctx, t, kube, pod, 60*time.Second, "init container running", func(p *corev1.Pod) bool {
			return len(p.Status.InitContainerStatuses) == 1 && p.Status.InitContainerStatuses[0].State.Running != nil
		})
		t.Logf("init container running %.1fs after create", time.Since(begin).Seconds())
		assert.Equal(t, corev1.PodPending, p.Status.Phase, "Pending while an init container runs")
		init := findCondition(p, corev1.PodInitialized)
		require.NotNil(t, init)
		assert.Equal(t, corev1.ConditionFalse, init.Status)
		assert.Equal(t, "containers with incomplete status: [slow]", init.Message)
		assert.Equal(t, corev1.ConditionTrue, conditionStatus(p, corev1.PodReadyToStartContainers))
		if assert.NotNil(t, p.Status.ContainerStatuses[0].State.Waiting) {
			assert.Equal(t, "PodInitializing", p.Status.ContainerStatuses[0].State.Waiting.Reason)
		}
		assert.Equal(t, []string{"slow"}, podContainerNames(ctx, t, env, docker, p))

		// Its log says once it ignores SIGTERM (a Go program exits on it until then).
		eventually(t, 10*time.Second, "init container ignores SIGTERM", func() string {
			out, err := env.KubectlRunner().Run(ctx, "logs", pod.Name, "-c", "slow")
			if err != nil || !strings.Contains(out, "ignoring SIGTERM") {
				return fmt.Sprintf("log %q, %v", out, err)
			}
			return ""
		})
		filter := dockernet.InstanceFilter(env.Instance).Add("label", dockernet.LabelPodUID+"="+string(p.UID))
		deleted := time.Now()
		require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
		waitPodAndContainerGone(ctx, t, kube, docker, filter, ns, pod.Name)
		took := time.Since(deleted)
		t.Logf("pod and containers gone %.1fs after delete (grace %ds, the init container ignores SIGTERM)", took.Seconds(), grace)
		assert.Less(t, took, (grace+2)*time.Second, "gone within the grace period (and a little polling)")
		assert.Greater(t, took, grace*time.Second*3/4, "the init container got its grace period, not an immediate SIGKILL")
		t.Logf("took %.1fs", time.Since(begin).Seconds())
	})
}

// initPod is a pod whose init containers share the emptyDir /work with its app
// container, which serves devpod requests on port 7000. image is the test image's own
// tag (see testimage.Ensure), so that these devpod commands are there.
func initPod(image, name string, policy corev1.RestartPolicy, inits ...corev1.Container) *corev1.Pod {
	work := []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
	for i := range inits {
		inits[i].VolumeMounts = work
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:  policy,
			InitContainers: inits,
			Containers: []corev1.Container{{
				Name: "app", Image: image, Args: []string{"serve", "--port", "7000"}, VolumeMounts: work,
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(7000)}}, PeriodSeconds: 1},
			}},
			Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

// initContainer runs devpod (from image) with args, the pod's IP in $POD_IP.
func initContainer(image, name string, args ...string) corev1.Container {
	return corev1.Container{
		Name: name, Image: image, Args: args,
		Env: []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
	}
}

// podContainerNames lists, sorted, the pod containers Docker has for pod p.
func podContainerNames(ctx context.Context, t *testing.T, env *devtest.Env, docker *client.Client, p *corev1.Pod) []string {
	t.Helper()
	filter := dockernet.InstanceFilter(env.Instance).Add("label", dockernet.LabelPodUID+"="+string(p.UID))
	list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filter})
	require.NoError(t, err)
	var names []string
	for _, c := range list.Items {
		names = append(names, c.Labels[dockernet.LabelContainer])
	}
	sort.Strings(names)
	return names
}

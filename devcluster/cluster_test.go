//go:build envtest

package devcluster_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/gomomento/valkey-operator/devcluster/devtest"
	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/devcluster/testimage"
	"github.com/gomomento/valkey-operator/internal/poll"
)

// ask sends one devpod request to the pod over its own address, from the
// host, and returns the answer.
func ask(ip, req string) (string, error) {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "7000"), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintln(conn, req); err != nil {
		return "", err
	}
	b, err := io.ReadAll(bufio.NewReader(conn))
	return string(b), err
}

// eventually polls cond until it returns "" (done) or timeout passes, failing with cond's
// last explanation.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	err := poll.Until(context.Background(), 100*time.Millisecond, timeout, what, func(context.Context) (bool, string, error) {
		last := cond()
		return last == "", last, nil
	})
	require.NoError(t, err)
}

// waitRunningReady waits until pod ns/name is Running and Ready and returns its IP.
func waitRunningReady(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns, name string) string {
	t.Helper()
	var ip string
	eventually(t, 60*time.Second, name+" Running and Ready", func() string {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.Status.Phase != corev1.PodRunning || !podCondition(p, corev1.PodReady) {
			return fmt.Sprintf("phase %s, ready %v, reason %q %q", p.Status.Phase, podCondition(p, corev1.PodReady), p.Status.Reason, p.Status.Message)
		}
		ip = p.Status.PodIP
		return ""
	})
	return ip
}

// podContainer is the Docker ID of the one container of pod ns/name, and the filter that
// finds the pod's containers.
func podContainer(ctx context.Context, t *testing.T, env *devtest.Env, docker *client.Client, ns, name string) (string, client.Filters) {
	t.Helper()
	p, err := env.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	filter := dockernet.InstanceFilter(env.Instance).Add("label", dockernet.LabelPodUID+"="+string(p.UID))
	list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filter})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	return list.Items[0].ID, filter
}

// waitPodAndContainerGone waits until pod ns/name is deleted and no container filter
// selects is left.
func waitPodAndContainerGone(ctx context.Context, t *testing.T, kube kubernetes.Interface, docker *client.Client, filter client.Filters, ns, name string) {
	t.Helper()
	eventually(t, 30*time.Second, "pod and container gone", func() string {
		if _, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("pod still there (%v)", err)
		}
		list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filter})
		if err != nil {
			return err.Error()
		}
		if len(list.Items) > 0 {
			return "container still there"
		}
		return ""
	})
}

func podCondition(p *corev1.Pod, c corev1.PodConditionType) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == c {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func int64p(v int64) *int64 { return &v }
func boolp(v bool) *bool    { return &v }

// TestDevClusterRunsPods starts the control plane and six nodes, then checks
// a Valkey-shaped pod end to end: scheduling, pod IP known to the process
// through the downward API, env and $(VAR) args, a ConfigMap volume readable
// by uid 999 and re-synced on change, tcpSocket readiness, exec readiness,
// exit reflected in status, kubectl logs, and graceful deletion.
func TestDevClusterRunsPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	image, err := testimage.Ensure(ctx)
	require.NoError(t, err)

	start := time.Now()
	env := devtest.Start(t, devtest.Options{ValkeyImage: image})
	t.Logf("control plane ready after %.1fs, %d nodes ready after %.1fs (total %.1fs)",
		env.Cluster.ControlPlaneReady.Seconds(), env.Cluster.Options.Nodes, env.Cluster.NodesReady.Seconds(), time.Since(start).Seconds())
	kube := env.Kube
	docker, err := dockernet.NewClient()
	require.NoError(t, err)
	defer docker.Close()
	subnet := env.Cluster.Network.Subnet

	t.Run("nodes", func(t *testing.T) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		zones := map[string]int{}
		for _, n := range nodes.Items {
			zones[n.Labels[corev1.LabelTopologyZone]]++
			assert.Equal(t, n.Name, n.Labels[corev1.LabelHostname])
			assert.False(t, n.Status.Allocatable.Cpu().IsZero())
		}
		assert.Equal(t, map[string]int{"zone-a": 2, "zone-b": 2, "zone-c": 2}, zones)
		out := env.Kubectl(t, "get", "nodes", "-L", corev1.LabelTopologyZone)
		assert.Equal(t, 6, strings.Count(out, " Ready "), out)
	})

	ns := "default"
	_, err = kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "acl"}, Data: map[string]string{"users.acl": "user default on #abc\n"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "auth"}, Data: map[string][]byte{"password": []byte("pw-123")},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	pod := valkeyShapedPod("vc-0a1b2")
	_, err = kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	// Two more pods exercise exit status and exec probes meanwhile.
	_, err = kube.CoreV1().Pods(ns).Create(ctx, exitingPod("exits"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.CoreV1().Pods(ns).Create(ctx, execProbePod("execprobe"), metav1.CreateOptions{})
	require.NoError(t, err)

	createdAt := time.Now()
	ip := waitRunningReady(ctx, t, kube, ns, pod.Name)
	t.Logf("pod Running+Ready %.1fs after create, IP %s", time.Since(createdAt).Seconds(), ip)

	t.Run("pod IP and env", func(t *testing.T) {
		addr, err := netip.ParseAddr(ip)
		require.NoError(t, err)
		assert.True(t, subnet.Contains(addr), "pod IP %s in %s", ip, subnet)
		got, err := ask(ip, "ENV POD_IP")
		require.NoError(t, err, "host reaches the pod's address")
		assert.Equal(t, ip, got)
		got, err = ask(ip, "ARGS")
		require.NoError(t, err)
		assert.Contains(t, got, "--cluster-announce-ip "+ip, "$(POD_IP) expanded in args")
		for name, want := range map[string]string{"POD_NAME": pod.Name, "POD_NAMESPACE": ns, "PASSWORD": "pw-123"} {
			got, err := ask(ip, "ENV "+name)
			require.NoError(t, err)
			assert.Equal(t, want, got, name)
		}
		got, err = ask(ip, "ID")
		require.NoError(t, err)
		assert.Equal(t, "999:999", got)
	})

	t.Run("configmap volume follows updates", func(t *testing.T) {
		got, err := ask(ip, "CAT /etc/valkey/acl/users.acl")
		require.NoError(t, err)
		assert.Equal(t, "user default on #abc\n", got)
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "acl", metav1.GetOptions{})
		require.NoError(t, err)
		cm.Data["users.acl"] = "user default on #def\n"
		_, err = kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		require.NoError(t, err)
		updated := time.Now()
		eventually(t, 30*time.Second, "file updated in container", func() string {
			got, err := ask(ip, "CAT /etc/valkey/acl/users.acl")
			if err != nil {
				return err.Error()
			}
			if got != "user default on #def\n" {
				return "still " + got
			}
			return ""
		})
		t.Logf("ConfigMap change visible in container after %.1fs", time.Since(updated).Seconds())
	})

	t.Run("secret volume readable by uid 999", func(t *testing.T) {
		got, err := ask(ip, "CAT /etc/valkey/tls/password")
		require.NoError(t, err)
		assert.Equal(t, "pw-123", got)
	})

	t.Run("kubectl logs", func(t *testing.T) {
		out := env.Kubectl(t, "logs", pod.Name)
		assert.Contains(t, out, "devpod listening on 7000")
	})

	t.Run("exit reflected in status", func(t *testing.T) {
		eventually(t, 60*time.Second, "exiting pod Failed", func() string {
			p, err := kube.CoreV1().Pods(ns).Get(ctx, "exits", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if p.Status.Phase != corev1.PodFailed || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil {
				return fmt.Sprintf("phase %s, statuses %+v", p.Status.Phase, p.Status.ContainerStatuses)
			}
			assert.Equal(t, int32(3), p.Status.ContainerStatuses[0].State.Terminated.ExitCode)
			return ""
		})
	})

	t.Run("exec readiness probe", func(t *testing.T) {
		eventually(t, 60*time.Second, "exec-probed pod Ready", func() string {
			p, err := kube.CoreV1().Pods(ns).Get(ctx, "execprobe", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if !podCondition(p, corev1.PodReady) {
				return fmt.Sprintf("phase %s not ready", p.Status.Phase)
			}
			return ""
		})
	})

	t.Run("delete stops the container gracefully", func(t *testing.T) {
		id, filter := podContainer(ctx, t, env, docker, ns, pod.Name)

		// The container's die event says how its process ended: devpod exits 0 when it gets
		// SIGTERM, while a SIGKILL at the end of the grace period would show exit code 137.
		evCtx, stopEvents := context.WithTimeout(ctx, time.Minute)
		defer stopEvents()
		events := docker.Events(evCtx, client.EventsListOptions{Filters: make(client.Filters).
			Add("type", "container").Add("container", id).Add("event", "die")})

		deleted := time.Now()
		require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
		select {
		case m := <-events.Messages:
			assert.Equal(t, "0", m.Actor.Attributes["exitCode"],
				"exit code of the deleted pod's container: 0 is devpod's answer to SIGTERM (137 would be SIGKILL)")
			t.Logf("container exited with %s %.1fs after the delete", m.Actor.Attributes["exitCode"], time.Since(deleted).Seconds())
		case err := <-events.Err:
			t.Fatalf("no die event for container %s: %v", id, err)
		}
		waitPodAndContainerGone(ctx, t, kube, docker, filter, ns, pod.Name)
		// A figure, not a check: the exit code above is what proves the graceful stop.
		t.Logf("figure: pod deleted and container removed in %.1fs (grace period 20s)", time.Since(deleted).Seconds())
		_, err = ask(ip, "ID")
		assert.Error(t, err, "address no longer answers")
	})
}

// ownerOnly is a restrictive secret file mode: the files must still be
// readable by the pod's user (999).
var ownerOnly int32 = 0o400

func valkeyShapedPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "devpod"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: int64p(20),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: boolp(true), RunAsUser: int64p(999), RunAsGroup: int64p(999), FSGroup: int64p(999),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:    "valkey",
				Image:   "registry.invalid/not-present/valkey:8.0", // falls back to the local image
				Command: []string{"/devpod"},
				Args:    []string{"serve", "--port", "7000", "--cluster-announce-ip", "$(POD_IP)"},
				Env: []corev1.EnvVar{
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "auth"}, Key: "password"}}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "acl", MountPath: "/etc/valkey/acl"}, {Name: "tls", MountPath: "/etc/valkey/tls"}, {Name: "data", MountPath: "/data"}},
				Ports:        []corev1.ContainerPort{{Name: "client", ContainerPort: 7000}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("client")}},
					PeriodSeconds: 2,
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: boolp(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "acl", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "acl"}}}},
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "auth", DefaultMode: &ownerOnly}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

func exitingPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: testimage.Image, Args: []string{"exit", "3"}}},
		},
	}
}

func execProbePod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "main", Image: testimage.Image, Args: []string{"serve", "--port", "7000"},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/devpod", "cat", "/devpod"}}},
					PeriodSeconds: 5,
				},
			}},
		},
	}
}

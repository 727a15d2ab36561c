//go:build envtest

package devcluster_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gomomento/valkey-operator/devcluster/devtest"
	"github.com/gomomento/valkey-operator/devcluster/loadbalancer"
	"github.com/gomomento/valkey-operator/devcluster/testimage"
	"github.com/gomomento/valkey-operator/internal/poll"
)

// TestDevClusterLoadBalancer: each Service of type LoadBalancer gets an address of its own in
// the instance's loopback range (status.loadBalancer.ingress), and a TCP connection to it
// reaches that Service's pod and no other, through real forwarding (the pod answers with its
// own arguments); a connection from outside loadBalancerSourceRanges is closed unanswered;
// a deleted Service's address stops accepting.
func TestDevClusterLoadBalancer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	image, err := testimage.Ensure(ctx)
	require.NoError(t, err)
	env := devtest.Start(t, devtest.Options{ValkeyImage: image})
	pods, services := env.Kube.CoreV1().Pods("default"), env.Kube.CoreV1().Services("default")

	names := []string{"lb-a", "lb-b", "lb-ranged"}
	for _, name := range names {
		_, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: int64p(1), Containers: []corev1.Container{{
				Name: "main", Image: image, Args: []string{"serve", "--port", "7000", "--marker", name},
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1,
					ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(7000)}}},
			}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Name: "client", Port: 6379, TargetPort: intstr.FromInt32(7000), Protocol: corev1.ProtocolTCP}}},
		}
		if name == "lb-ranged" {
			svc.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"} // not the host's loopback
		}
		_, err = services.Create(ctx, svc, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	addrs := map[string]string{}
	for _, name := range names {
		require.NoError(t, poll.Until(ctx, 100*time.Millisecond, 90*time.Second, name+" has an ingress IP", func(ctx context.Context) (bool, string, error) {
			svc, err := services.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if in := svc.Status.LoadBalancer.Ingress; len(in) == 1 && in[0].IP != "" {
				addrs[name] = in[0].IP
				return true, "", nil
			}
			return false, fmt.Sprintf("ingress %+v", svc.Status.LoadBalancer.Ingress), nil
		}))
		ip, err := netip.ParseAddr(addrs[name])
		require.NoError(t, err)
		assert.True(t, loadbalancer.Prefix(env.Instance).Contains(ip), "%s: %s is in the instance's range", name, ip)
	}
	assert.NotEqual(t, addrs["lb-a"], addrs["lb-b"], "each Service has an address of its own")

	for _, name := range []string{"lb-a", "lb-b"} {
		var answer string
		require.NoError(t, poll.Until(ctx, 200*time.Millisecond, 60*time.Second, name+" answers through its address", func(context.Context) (bool, string, error) {
			answer, err = askLB(net.JoinHostPort(addrs[name], "6379"), "ARGS")
			if err != nil {
				return false, err.Error(), nil
			}
			return strings.Contains(answer, "--marker "+name), answer, nil
		}))
		assert.Contains(t, answer, "--marker "+name, "the connection reached %s's own pod", name)
	}

	// The ranged Service's pod answers on its own IP, yet the host is outside its ranges.
	ranged, err := pods.Get(ctx, "lb-ranged", metav1.GetOptions{})
	require.NoError(t, err)
	ranged = awaitPod(ctx, t, env.Kube, ranged, 60*time.Second, "lb-ranged ready", func(p *corev1.Pod) bool {
		c := findCondition(p, corev1.PodReady)
		return c != nil && c.Status == corev1.ConditionTrue && p.Status.PodIP != ""
	})
	direct, err := askLB(net.JoinHostPort(ranged.Status.PodIP, "7000"), "ARGS")
	require.NoError(t, err)
	require.Contains(t, direct, "--marker lb-ranged")
	_, err = askLB(net.JoinHostPort(addrs["lb-ranged"], "6379"), "ARGS")
	assert.Error(t, err, "a client outside loadBalancerSourceRanges gets no answer")

	require.NoError(t, services.Delete(ctx, "lb-a", metav1.DeleteOptions{}))
	require.NoError(t, poll.Until(ctx, 100*time.Millisecond, 30*time.Second, "lb-a's address stops accepting", func(context.Context) (bool, string, error) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(addrs["lb-a"], "6379"), time.Second)
		if err != nil {
			return true, "", nil
		}
		_ = c.Close()
		return false, "still accepting", nil
	}))
}

// askLB sends one devpod request line to addr (host:port) and returns the answer; an empty
// answer is an error.
func askLB(addr, line string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	out, err := io.ReadAll(c)
	if len(out) == 0 {
		return "", fmt.Errorf("no answer: %v", err)
	}
	return string(out), nil
}

package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gomomento/valkey-operator/internal/poll"
)

// The fleet scenario measures the operator as users run it: deploy/ applied with `kubectl
// apply -k` of an overlay that sets nothing but the image, so two replicas with leader
// election, the ServiceAccount's token and RBAC, the admission policies, the Deployment's
// resources and arguments. The leader does the work; its RSS and CPU are read from /proc of
// its container's process and its memory working set from the container's cgroup (what the
// kubelet and metrics-server report), the API requests from both replicas' metrics endpoints,
// and the Lease renewals from a watch on the Lease, so that they can be told apart from the
// rest of the writes.

var (
	fleetHostOperator = flag.Bool("fleet-host-operator", false, "fleet: run the operator on the host (admin kubeconfig, no leader election) instead of deploy/'s Deployment")
	operatorImage     = flag.String("operator-image", cmp.Or(os.Getenv("IMAGE"), "valkey-operator:dev"), "fleet: the operator image deploy/ runs (make image; default $IMAGE)")
)

const (
	// shippedNamespace, shippedDeployment and shippedLease are deploy/'s.
	shippedNamespace  = "valkey-operator"
	shippedDeployment = "valkey-operator"
	shippedLease      = "valkey-operator-leader"
	shippedMetrics    = "8080"
)

// fleetOperator is the operator the fleet scenario measures.
type fleetOperator interface {
	// pid is the host process of the operator doing the work (the leader).
	pid(ctx context.Context) (int, error)
	// metricsURLs lists every replica's metrics endpoint; API requests are summed over them.
	metricsURLs(ctx context.Context) ([]string, error)
	// memoryWorkingSetMiB is the working operator's container working set (cgroup), or -1
	// when it does not run in a container.
	memoryWorkingSetMiB(ctx context.Context) (float64, error)
	// log is the working operator's log: JSON lines.
	log(ctx context.Context) (string, error)
}

// hostOperator is the manager run on the host by startOperator.
type hostOperator struct{ b *bench }

func (h hostOperator) pid(context.Context) (int, error) { return h.b.op.Pid(), nil }
func (h hostOperator) metricsURLs(context.Context) ([]string, error) {
	return []string{h.b.op.MetricsURL}, nil
}
func (h hostOperator) memoryWorkingSetMiB(context.Context) (float64, error) { return -1, nil }
func (h hostOperator) log(context.Context) (string, error) {
	b, err := os.ReadFile(h.b.opLog)
	return string(b), err
}

// shippedOperator is deploy/'s Deployment, installed by installShipped.
type shippedOperator struct{ b *bench }

// installShipped applies deploy/ through an overlay that points it at -operator-image and
// waits for the Deployment's rollout and for a leader.
func (b *bench) installShipped(ctx context.Context) error {
	if *heapProfile != "" {
		return errors.New("-operator-heap-profile needs -fleet-host-operator (the Deployment serves no pprof)")
	}
	if _, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", *operatorImage); err != nil {
		return fmt.Errorf("the operator image %s (make image): %w", *operatorImage, err)
	}
	dir, err := os.MkdirTemp(b.logDir, "overlay-")
	if err != nil {
		return err
	}
	base, err := filepath.Rel(dir, filepath.Join(b.root, "deploy"))
	if err != nil {
		return err
	}
	name, tag := *operatorImage, "latest"
	if i := strings.LastIndexByte(name, ':'); i > 0 && !strings.Contains(name[i:], "/") {
		name, tag = name[:i], name[i+1:]
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\nimages:\n  - name: valkey-operator\n    newName: %s\n    newTag: %s\n", base, name, tag)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return err
	}
	if out, err := b.kubectl.Run(ctx, "apply", "-k", dir); err != nil {
		return fmt.Errorf("kubectl apply -k deploy/ overlay: %w: %s", err, out)
	}
	if out, err := b.kubectl.In(shippedNamespace).Run(ctx, "rollout", "status", "deployment/"+shippedDeployment, "--timeout=180s"); err != nil {
		return fmt.Errorf("the operator's Deployment did not turn ready: %w: %s", err, out)
	}
	op := shippedOperator{b}
	leader, err := op.leader(ctx)
	if err != nil {
		return err
	}
	// The leader starts its controller only once it holds the Lease and its caches have
	// synced: a cluster applied before that would time the start-up, not the operator.
	err = poll.Until(ctx, 200*time.Millisecond, time.Minute, "the leader's controller started", func(ctx context.Context) (bool, string, error) {
		text, err := op.log(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		return strings.Contains(text, `"msg":"Starting workers"`), "not yet in its log", nil
	})
	if err != nil {
		return err
	}
	logf("operator installed from deploy/ (%s); %s leads", *operatorImage, leader)
	return nil
}

// leader waits until the Lease names a running pod of the Deployment and returns its name
// (controller-runtime's identity is the pod's hostname and a suffix).
func (s shippedOperator) leader(ctx context.Context) (string, error) {
	var pod string
	err := poll.Until(ctx, 200*time.Millisecond, time.Minute, "an operator pod leads", func(ctx context.Context) (bool, string, error) {
		l, err := s.b.env.Kube.CoordinationV1().Leases(shippedNamespace).Get(ctx, shippedLease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, fmt.Sprintf("no holder (%v)", err), nil
		}
		pod, _, _ = strings.Cut(*l.Spec.HolderIdentity, "_")
		p, err := s.b.env.Kube.CoreV1().Pods(shippedNamespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return p.Status.Phase == "Running", "holder " + pod + " " + string(p.Status.Phase), nil
	})
	return pod, err
}

func (s shippedOperator) container(ctx context.Context) (string, error) {
	pod, err := s.leader(ctx)
	if err != nil {
		return "", err
	}
	ids, err := s.b.containers(ctx, shippedNamespace, pod)
	if err != nil {
		return "", err
	}
	if len(ids) != 1 {
		return "", fmt.Errorf("want one container for the leader %s, found %v", pod, ids)
	}
	return ids[0], nil
}

func (s shippedOperator) pid(ctx context.Context) (int, error) {
	id, err := s.container(ctx)
	if err != nil {
		return 0, err
	}
	out, err := docker(ctx, "inspect", "--format", "{{.State.Pid}}", id)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

func (s shippedOperator) metricsURLs(ctx context.Context) ([]string, error) {
	pods, err := s.b.env.Kube.CoreV1().Pods(shippedNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=valkey-operator"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			out = append(out, "http://"+net.JoinHostPort(p.Status.PodIP, shippedMetrics)+"/metrics")
		}
	}
	if len(out) != 2 {
		return nil, fmt.Errorf("want deploy/'s two operator pods, found %d with an address", len(out))
	}
	return out, nil
}

func (s shippedOperator) memoryWorkingSetMiB(ctx context.Context) (float64, error) {
	pid, err := s.pid(ctx)
	if err != nil {
		return 0, err
	}
	return cgroupWorkingSetMiB(pid)
}

func (s shippedOperator) log(ctx context.Context) (string, error) {
	pod, err := s.leader(ctx)
	if err != nil {
		return "", err
	}
	return s.b.kubectl.In(shippedNamespace).Run(ctx, "logs", pod, "--tail=-1")
}

// cgroupWorkingSetMiB is the memory working set of pid's memory cgroup, as the kubelet
// computes it: usage less inactive file pages (cgroup v1 or v2).
func cgroupWorkingSetMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var dir, usageFile, inactiveKey string
		switch {
		case f[0] == "0" && f[1] == "" && f[2] != "/":
			dir, usageFile, inactiveKey = filepath.Join("/sys/fs/cgroup", f[2]), "memory.current", "inactive_file"
		case strings.Contains(","+f[1]+",", ",memory,"):
			dir, usageFile, inactiveKey = filepath.Join("/sys/fs/cgroup/memory", f[2]), "memory.usage_in_bytes", "total_inactive_file"
		default:
			continue
		}
		usage, err := os.ReadFile(filepath.Join(dir, usageFile))
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
		if err != nil {
			return 0, err
		}
		u, err := strconv.ParseFloat(strings.TrimSpace(string(usage)), 64)
		if err != nil {
			return 0, err
		}
		for _, l := range strings.Split(string(stat), "\n") {
			if v, ok := strings.CutPrefix(l, inactiveKey+" "); ok {
				inactive, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				u = max(u-inactive, 0)
			}
		}
		return u / (1 << 20), nil
	}
	return 0, fmt.Errorf("no memory cgroup readable for pid %d", pid)
}

// leaseWrites counts the changes to deploy/'s Lease (each a renewal by the leader, or a
// change of hands) from its start until the returned function is called.
func (b *bench) leaseWrites(ctx context.Context) (func() int, error) {
	w, err := b.env.Kube.CoordinationV1().Leases(shippedNamespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + shippedLease})
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			if e.Type == watch.Modified {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}
	}()
	return func() int {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return n
	}, nil
}

// logTime reads a zap JSON line's "ts", an RFC 3339 time: whole seconds from the
// Deployment (controller-runtime's default encoder), sub-second from the host operator
// (--zap-time-encoding=rfc3339nano).
func logTime(line string) (time.Time, bool) {
	if !gjson.Valid(line) {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, gjson.Get(line, "ts").String())
	return t, err == nil
}

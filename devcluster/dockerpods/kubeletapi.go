package dockerpods

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet API (served by virtual-kubelet) makes `kubectl logs` and
// `kubectl exec` work against the dev cluster.

func (p *Provider) containerID(ns, pod, ctr string) (string, error) {
	st := p.get(ns, pod)
	if st == nil {
		return "", errdefs.NotFoundf("pod %s/%s not found", ns, pod)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	// The default container is the first app container; init containers by name.
	for _, c := range slices.Concat(st.ctrs, st.inits) {
		if c.name != ctr && (ctr != "" || c.init) {
			continue
		}
		if c.id == "" {
			// Not created yet (waiting for its turn, as a kubelet says), or an
			// init container that completed before the nodes process restarted
			// (see initializedBefore): its container is gone.
			return "", errdefs.NotFoundf("container %s in pod %s/%s has no Docker container: %s", c.name, ns, pod, stateName(c.state))
		}
		return c.id, nil
	}
	return "", errdefs.NotFoundf("container %s not found in pod %s/%s", ctr, ns, pod)
}

// GetContainerLogs implements nodeutil.Provider.
func (p *Provider) GetContainerLogs(ctx context.Context, ns, pod, ctr string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	id, err := p.containerID(ns, pod, ctr)
	if err != nil {
		return nil, err
	}
	o := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: opts.Follow, Timestamps: opts.Timestamps}
	if opts.Tail > 0 {
		o.Tail = strconv.Itoa(opts.Tail)
	}
	switch {
	case !opts.SinceTime.IsZero():
		o.Since = strconv.FormatInt(opts.SinceTime.Unix(), 10)
	case opts.SinceSeconds > 0:
		o.Since = strconv.FormatInt(time.Now().Add(-time.Duration(opts.SinceSeconds)*time.Second).Unix(), 10)
	}
	raw, err := p.shared.Docker.ContainerLogs(ctx, id, o)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, pw, raw)
		_ = raw.Close()
		_ = pw.CloseWithError(err)
	}()
	return pr, nil
}

// RunInContainer implements nodeutil.Provider with `docker exec`.
func (p *Provider) RunInContainer(ctx context.Context, ns, pod, ctr string, cmd []string, attach api.AttachIO) error {
	id, err := p.containerID(ns, pod, ctr)
	if err != nil {
		return err
	}
	tty := attach.TTY()
	created, err := p.shared.Docker.ExecCreate(ctx, id, client.ExecCreateOptions{
		Cmd: cmd, TTY: tty, AttachStdin: attach.Stdin() != nil, AttachStdout: attach.Stdout() != nil, AttachStderr: attach.Stderr() != nil,
	})
	if err != nil {
		return err
	}
	att, err := p.shared.Docker.ExecAttach(ctx, created.ID, client.ExecAttachOptions{TTY: tty})
	if err != nil {
		return err
	}
	defer att.Close()
	if tty && attach.Resize() != nil {
		go func() {
			for size := range attach.Resize() {
				_, _ = p.shared.Docker.ExecResize(ctx, created.ID, client.ExecResizeOptions{Height: uint(size.Height), Width: uint(size.Width)})
			}
		}()
	}
	if in := attach.Stdin(); in != nil {
		go func() {
			_, _ = io.Copy(att.Conn, in)
			_ = att.CloseWrite()
		}()
	}
	stdout, stderr := attach.Stdout(), attach.Stderr()
	if stdout == nil {
		stdout = nopCloser{io.Discard}
	}
	if stderr == nil {
		stderr = nopCloser{io.Discard}
	}
	if tty {
		_, err = io.Copy(stdout, att.Reader)
	} else {
		_, err = stdcopy.StdCopy(stdout, stderr, att.Reader)
	}
	if err != nil && ctx.Err() == nil {
		return err
	}
	ins, err := p.shared.Docker.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
	if err == nil && ins.ExitCode != 0 {
		return fmt.Errorf("command terminated with exit code %d", ins.ExitCode)
	}
	return nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// AttachToContainer is not supported by the dev kubelet.
func (p *Provider) AttachToContainer(context.Context, string, string, string, api.AttachIO) error {
	return fmt.Errorf("attach is not supported by the dev kubelet; use exec")
}

// PortForward is not supported: pod addresses are reachable from the host.
func (p *Provider) PortForward(context.Context, string, string, int32, io.ReadWriteCloser) error {
	return fmt.Errorf("port-forward is not supported by the dev kubelet; pod IPs are reachable from the host")
}

// GetStatsSummary reports the node and its pods without usage figures.
func (p *Provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	now := metav1.Now()
	s := &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: p.nodeName, StartTime: now}}
	for _, st := range p.snapshot() {
		pod := st.snapshot()
		s.Pods = append(s.Pods, statsv1alpha1.PodStats{
			PodRef:    statsv1alpha1.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
			StartTime: now,
		})
	}
	return s, nil
}

// GetMetricsResource reports no metrics.
func (p *Provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, nil
}

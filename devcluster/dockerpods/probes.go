package dockerpods

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/moby/moby/client"
	"github.com/virtual-kubelet/virtual-kubelet/log"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// notReadyPeriod caps the readiness probe period until the first success.
// A kubelet waits a full periodSeconds between attempts; the dev kubelet
// probes a not-yet-ready container more often so that freshly started pods
// turn Ready within a second of listening. Once ready, periodSeconds applies.
const notReadyPeriod = 500 * time.Millisecond

// startupWindow and startupRetry: for the first startupWindow of a container's
// run, until its readiness probe first passes, the dev kubelet probes every
// startupRetry; then every notReadyPeriod. It reports a container running
// the moment Docker started it and probes it at once, before the server in
// it had time to listen, so that first probe nearly always fails; with
// notReadyPeriod after it every pod turned Ready up to half a second after
// it was listening (issue #14). A kubelet does not lose that race the same
// way: it sees the container running only on its next relist (PLEG, up to a
// second later) and probes then (a manual trigger, not the period), by when
// a server has long been listening. Frequent probes in the first seconds
// give the same outcome, Ready soon after listening, also when a loaded
// machine makes the server take a second or more to start. The cost is a
// few dozen dials in a container's first seconds; exec probes, each a
// Docker exec that would slow the other pods' starts, keep notReadyPeriod.
const (
	startupWindow = 3 * time.Second
	startupRetry  = 100 * time.Millisecond
)

// notReadyWait is the pause before the next TCP or HTTP readiness probe of
// a container that has not passed one yet and whose probes began since ago:
// startupRetry within startupWindow, notReadyPeriod after it, never over
// the probe's own period.
func notReadyWait(since, period time.Duration) time.Duration {
	if since < startupWindow {
		return min(startupRetry, period)
	}
	return min(notReadyPeriod, period)
}

// runProbes runs the startup, liveness and readiness probes of container i
// for as long as ctx lives (one run of the container).
func (p *Provider) runProbes(ctx context.Context, st *podState, i int) {
	st.mu.Lock()
	c := st.pod.Spec.Containers[i].DeepCopy()
	st.mu.Unlock()

	if c.StartupProbe != nil {
		if !p.probeLoop(ctx, st, i, c, c.StartupProbe, "startup") {
			return
		}
		if st.update(func() { st.ctrs[i].started = true }) {
			p.publish(st)
		}
	}
	if c.LivenessProbe != nil {
		go p.probeLoop(ctx, st, i, c, c.LivenessProbe, "liveness")
	}
	if c.ReadinessProbe == nil {
		if st.update(func() { st.ctrs[i].ready = true }) {
			p.publish(st)
		}
		return
	}
	p.probeLoop(ctx, st, i, c, c.ReadinessProbe, "readiness")
}

// probeLoop runs one probe. Readiness loops until ctx ends; startup returns
// true on success; startup and liveness stop the container after
// failureThreshold consecutive failures.
func (p *Provider) probeLoop(ctx context.Context, st *podState, i int, c *corev1.Container, probe *corev1.Probe, kind string) bool {
	if !sleepCtx(ctx, time.Duration(probe.InitialDelaySeconds)*time.Second) {
		return false
	}
	period := secondsOr(probe.PeriodSeconds, 10)
	successThreshold := int(max(probe.SuccessThreshold, 1))
	failureThreshold := int(max(probe.FailureThreshold, 3))
	if probe.FailureThreshold > 0 {
		failureThreshold = int(probe.FailureThreshold)
	}
	ready, succ, fail := false, 0, 0
	// everReady: this run of the container has passed the probe once; from
	// then on a not-ready container is probed every notReadyPeriod as before.
	everReady, began := false, time.Now()
	for {
		if kind != "readiness" && st.isDeleting() {
			// A kubelet stops the liveness and startup probes of a pod being
			// deleted, counting them as passed; readiness goes on.
			return kind == "startup"
		}
		ok := p.probeOnce(ctx, st, c, probe)
		if ctx.Err() != nil {
			return false
		}
		if ok {
			succ, fail = succ+1, 0
		} else {
			succ, fail = 0, fail+1
		}
		switch kind {
		case "startup":
			if succ >= 1 {
				return true
			}
			if fail >= failureThreshold {
				p.failProbe(ctx, st, i, kind)
				return false
			}
		case "liveness":
			if fail >= failureThreshold {
				p.failProbe(ctx, st, i, kind)
				return false
			}
		case "readiness":
			next := ready
			if !ready && succ >= successThreshold {
				next = true
			}
			if ready && fail >= failureThreshold {
				next = false
			}
			if next != ready {
				ready = next
				everReady = everReady || ready
				if st.update(func() { st.ctrs[i].ready = ready }) {
					p.publish(st)
				}
			}
		}
		wait := period
		switch {
		case kind == "liveness" || ready:
		case kind == "readiness" && !everReady && probe.Exec == nil:
			wait = notReadyWait(time.Since(began), period)
		default:
			// Startup probes too: their failures count towards restarting
			// the container, so they are not hurried further.
			wait = min(period, notReadyPeriod)
		}
		if !sleepCtx(ctx, wait) {
			return false
		}
	}
}

func (p *Provider) failProbe(ctx context.Context, st *podState, i int, kind string) {
	st.mu.Lock()
	grace := gracePeriod(st.pod)
	st.mu.Unlock()
	log.G(ctx).WithField("pod", st.key).Warnf("%s probe of %s failed, restarting it", kind, st.ctrs[i].name)
	if err := p.stopContainer(context.WithoutCancel(ctx), st, i, grace); err != nil {
		log.G(ctx).WithField("pod", st.key).WithError(err).Warn("stop container")
	}
}

func (p *Provider) probeOnce(ctx context.Context, st *podState, c *corev1.Container, probe *corev1.Probe) bool {
	timeout := secondsOr(probe.TimeoutSeconds, 1)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case probe.TCPSocket != nil:
		port, err := resolvePort(probe.TCPSocket.Port, c)
		if err != nil {
			return false
		}
		host := probe.TCPSocket.Host
		if host == "" {
			host = st.ip.String()
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	case probe.Exec != nil:
		st.mu.Lock()
		id := st.ctrs[indexOf(st, c.Name)].id
		st.mu.Unlock()
		code, _, err := p.exec(ctx, id, probe.Exec.Command)
		return err == nil && code == 0
	case probe.HTTPGet != nil:
		code, err := httpGet(ctx, st, c, probe.HTTPGet)
		return err == nil && code >= 200 && code < 400
	}
	log.G(ctx).WithField("pod", st.key).Warn("probe kind not supported by the dev kubelet; counting as failure")
	return false
}

// httpGet sends the GET of a probe or lifecycle hook to container c (at the
// pod's address unless the action names a host) and returns the status code.
func httpGet(ctx context.Context, st *podState, c *corev1.Container, g *corev1.HTTPGetAction) (int, error) {
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return 0, err
	}
	host := g.Host
	if host == "" {
		host = st.ip.String()
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), g.Path), nil)
	if err != nil {
		return 0, err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	// Certificates are not verified, as a kubelet's probes and hooks do not.
	cl := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
		DisableKeepAlives: true,
	}}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func indexOf(st *podState, name string) int {
	for i, c := range st.ctrs {
		if c.name == name {
			return i
		}
	}
	return 0
}

// exec runs cmd in container id and returns its exit code and output.
func (p *Provider) exec(ctx context.Context, id string, cmd []string) (int, []byte, error) {
	created, err := p.shared.Docker.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return -1, nil, err
	}
	att, err := p.shared.Docker.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return -1, nil, err
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			att.Close()
		case <-done:
		}
	}()
	out, _ := io.ReadAll(att.Reader)
	close(done)
	att.Close()
	if ctx.Err() != nil {
		return -1, out, ctx.Err()
	}
	ins, err := p.shared.Docker.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
	if err != nil {
		return -1, out, err
	}
	return ins.ExitCode, out, nil
}

func resolvePort(port intstr.IntOrString, c *corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, port.StrVal)
}

func secondsOr(v int32, def int) time.Duration {
	if v <= 0 {
		return time.Duration(def) * time.Second
	}
	return time.Duration(v) * time.Second
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

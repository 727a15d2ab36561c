package dockerpods

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/virtual-kubelet/virtual-kubelet/log"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/devcluster/podenv"
)

// containerName is unique per pod incarnation (the UID prefix keeps a
// re-created pod of the same name from clashing with one still stopping).
func (p *Provider) containerName(pod *corev1.Pod, c string) string {
	return fmt.Sprintf("%s_%s_%s_%s_%s", p.shared.Instance, pod.Namespace, pod.Name, c, string(pod.UID)[:8])
}

// resolveImage returns the image to run: the one named when present locally,
// else the fallback (the locally built Valkey image), since nothing can be
// pulled here.
func (p *Provider) resolveImage(ctx context.Context, image string) (string, string, *string, error) {
	fallback := p.shared.FallbackImage
	if f, ok := p.shared.FallbackByMajor[majorOfTag(image)]; ok && f != "" {
		fallback = f
	}
	for _, candidate := range []string{image, fallback, p.shared.FallbackImage} {
		if candidate == "" {
			continue
		}
		res, err := p.shared.Docker.ImageInspect(ctx, candidate)
		if err == nil {
			var user *string
			if res.Config != nil {
				u := res.Config.User
				user = &u
			}
			if candidate != image {
				log.G(ctx).Infof("image %q not present locally, running %q instead", image, candidate)
			}
			return candidate, res.ID, user, nil
		}
		if !cerrdefs.IsNotFound(err) {
			return "", "", nil, err
		}
	}
	return "", "", nil, fmt.Errorf("image %q not present locally and fallback image %q missing (build it first)", image, p.shared.FallbackImage)
}

// majorOfTag returns the leading number of an image tag ("9" for
// "valkey/valkey:9.1.2"), or "".
func majorOfTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	i := strings.LastIndexByte(image, ':')
	if i < 0 || strings.Contains(image[i:], "/") {
		return ""
	}
	tag := image[i+1:]
	j := 0
	for j < len(tag) && tag[j] >= '0' && tag[j] <= '9' {
		j++
	}
	return tag[:j]
}

// createContainer creates container ctr of the pod, init or app container
// alike: same image resolution, env, security context, volumes and limits.
func (p *Provider) createContainer(ctx context.Context, st *podState, ctr *ctrState) error {
	st.mu.Lock()
	pod := st.pod.DeepCopy()
	st.mu.Unlock()
	c := ctr.specIn(pod)

	image, imageID, imageUser, err := p.resolveImage(ctx, c.Image)
	if err != nil {
		return err
	}
	res, err := podenv.Resolve(pod, c, podenv.Facts{PodIP: st.ip.String(), HostIP: st.hostIP.String(), APIServer: p.shared.APIServer}, p.lookup(ctx))
	if err != nil {
		return fmt.Errorf("container %s: %w", c.Name, err)
	}
	sc := effectiveSecurity(pod, c)
	if sc.runAsNonRoot && sc.user == "" && (imageUser == nil || isRootUser(*imageUser)) {
		return fmt.Errorf("container %s has runAsNonRoot and image will run as root", c.Name)
	}
	binds, err := p.binds(st, pod, c)
	if err != nil {
		return err
	}

	hostname := pod.Spec.Hostname
	if hostname == "" {
		hostname = pod.Name
	}
	if len(hostname) > 63 {
		hostname = hostname[:63]
	}
	labels := map[string]string{
		dockernet.LabelManaged:      "1",
		dockernet.LabelInstance:     p.shared.Instance,
		dockernet.LabelNode:         p.nodeName,
		dockernet.LabelPodNamespace: pod.Namespace,
		dockernet.LabelPodName:      pod.Name,
		dockernet.LabelPodUID:       string(pod.UID),
		dockernet.LabelContainer:    c.Name,
		dockernet.LabelPodIP:        st.ip.String(),
	}
	cfg := &container.Config{
		Hostname:   hostname,
		User:       sc.user,
		Env:        res.Env,
		Image:      image,
		WorkingDir: c.WorkingDir,
		Labels:     labels,
		Tty:        c.TTY,
		OpenStdin:  c.Stdin,
		StdinOnce:  c.StdinOnce,
	}
	if len(res.Command) > 0 {
		cfg.Entrypoint = res.Command
		cfg.Cmd = res.Args // may be empty: a pod's command drops the image's CMD
	} else if len(res.Args) > 0 {
		cfg.Cmd = res.Args
	}
	host := &container.HostConfig{
		Binds:          binds,
		CapAdd:         sc.capAdd,
		CapDrop:        sc.capDrop,
		Privileged:     sc.privileged,
		ReadonlyRootfs: sc.readOnlyRoot,
		SecurityOpt:    sc.securityOpt,
		GroupAdd:       sc.groupAdd,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
	}
	if pod.Spec.SecurityContext != nil {
		for _, s := range pod.Spec.SecurityContext.Sysctls {
			if host.Sysctls == nil {
				host.Sysctls = map[string]string{}
			}
			host.Sysctls[s.Name] = s.Value
		}
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		host.Memory = q.Value()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		host.NanoCPUs = q.MilliValue() * 1_000_000
	}
	var netCfg *network.NetworkingConfig
	// The first app container holds the pod's address and the others join
	// its network namespace. Init containers run one at a time before it
	// exists, so each takes the address itself: Docker binds a static address
	// when a container starts, not when it is created.
	if ctr.init || ctr.index == 0 {
		host.NetworkMode = container.NetworkMode(p.shared.Network.Name)
		netCfg = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			p.shared.Network.Name: {
				IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: st.ip},
				Aliases:    []string{pod.Name},
			},
		}}
	} else {
		// Later containers join the first one's network namespace, so the
		// pod keeps one address as in Kubernetes.
		st.mu.Lock()
		first := st.ctrs[0].id
		st.mu.Unlock()
		host.NetworkMode = container.NetworkMode("container:" + first)
		cfg.Hostname = ""
	}
	created, err := p.shared.Docker.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: p.containerName(pod, c.Name), Config: cfg, HostConfig: host, NetworkingConfig: netCfg,
	})
	if err != nil {
		return fmt.Errorf("create container %s: %w", c.Name, err)
	}
	st.mu.Lock()
	ctr.id, ctr.image, ctr.imageID = created.ID, image, imageID
	st.mu.Unlock()
	return nil
}

func isRootUser(u string) bool {
	name, _, _ := strings.Cut(u, ":")
	return name == "" || name == "0" || name == "root"
}

type security struct {
	user               string
	runAsNonRoot       bool
	capAdd, capDrop    []string
	privileged         bool
	readOnlyRoot       bool
	securityOpt        []string
	groupAdd           []string
	uid, gid           int64 // -1 when unset
	fsGroup            int64 // -1 when unset
	allowPrivEscalateF bool
}

// effectiveSecurity merges pod- and container-level security contexts the
// way Kubernetes does (the container's fields win).
func effectiveSecurity(pod *corev1.Pod, c *corev1.Container) security {
	s := security{uid: -1, gid: -1, fsGroup: -1}
	seccompUnconfined := false
	// identity applies the fields both levels have; the container's call comes second.
	identity := func(user, group *int64, nonRoot *bool, seccomp *corev1.SeccompProfile) {
		if user != nil {
			s.uid = *user
		}
		if group != nil {
			s.gid = *group
		}
		if nonRoot != nil {
			s.runAsNonRoot = *nonRoot
		}
		if seccomp != nil {
			seccompUnconfined = seccomp.Type == corev1.SeccompProfileTypeUnconfined
		}
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		identity(psc.RunAsUser, psc.RunAsGroup, psc.RunAsNonRoot, psc.SeccompProfile)
		if psc.FSGroup != nil {
			s.fsGroup = *psc.FSGroup
			s.groupAdd = append(s.groupAdd, strconv.FormatInt(*psc.FSGroup, 10))
		}
		for _, g := range psc.SupplementalGroups {
			s.groupAdd = append(s.groupAdd, strconv.FormatInt(g, 10))
		}
	}
	if csc := c.SecurityContext; csc != nil {
		identity(csc.RunAsUser, csc.RunAsGroup, csc.RunAsNonRoot, csc.SeccompProfile)
		if csc.Capabilities != nil {
			for _, c := range csc.Capabilities.Add {
				s.capAdd = append(s.capAdd, string(c))
			}
			for _, c := range csc.Capabilities.Drop {
				s.capDrop = append(s.capDrop, string(c))
			}
		}
		if csc.Privileged != nil {
			s.privileged = *csc.Privileged
		}
		if csc.ReadOnlyRootFilesystem != nil {
			s.readOnlyRoot = *csc.ReadOnlyRootFilesystem
		}
		if csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation {
			s.securityOpt = append(s.securityOpt, "no-new-privileges")
		}
	}
	if seccompUnconfined {
		s.securityOpt = append(s.securityOpt, "seccomp=unconfined")
	}
	if s.uid >= 0 {
		s.user = strconv.FormatInt(s.uid, 10)
		if s.gid >= 0 {
			s.user += ":" + strconv.FormatInt(s.gid, 10)
		}
	}
	return s
}

func (p *Provider) startContainer(ctx context.Context, st *podState, c *ctrState) error {
	st.mu.Lock()
	id := c.id
	st.mu.Unlock()
	if _, err := p.shared.Docker.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start container %s: %w", c.name, err)
	}
	started := metav1.Now()
	if ins, err := p.shared.Docker.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err == nil && ins.Container.State != nil {
		if t, err := time.Parse(time.RFC3339Nano, ins.Container.State.StartedAt); err == nil {
			started = metav1.NewTime(t)
		}
	}
	st.update(func() {
		c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
		c.ready = false
		c.started = c.specIn(st.pod).StartupProbe == nil
	})
	return nil
}

// superviseContainer follows one container until ctx ends: it runs the
// probes while the container runs, records exits, and restarts it as the
// pod's restart policy says, with a short exponential back-off.
func (p *Provider) superviseContainer(ctx context.Context, st *podState, i int) {
	c := st.ctrs[i]
	backoff := time.Second
	for {
		probeCtx, stopProbes := context.WithCancel(ctx)
		go p.runProbes(probeCtx, st, i)
		term, ok := p.waitExit(ctx, st, c)
		stopProbes()
		if !ok {
			return
		}
		runFor := term.FinishedAt.Sub(term.StartedAt.Time)
		if !p.recordExit(ctx, st, c, term, backoff) {
			return
		}
		if runFor > time.Minute {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
		if st.isDeleting() {
			return
		}
		if err := p.startContainer(ctx, st, c); err != nil {
			log.G(ctx).WithField("pod", st.key).WithError(err).Warn("restart container")
			continue
		}
		st.update(func() { c.restarts++ })
		p.publish(st)
	}
}

// waitExit waits until container c stops and returns how it ended (with the
// tail of its logs as the message when its policy asks for it); false when
// ctx ended first.
func (p *Provider) waitExit(ctx context.Context, st *podState, c *ctrState) (*corev1.ContainerStateTerminated, bool) {
	st.mu.Lock()
	id := c.id
	st.mu.Unlock()
	wait := p.shared.Docker.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-ctx.Done():
	case <-wait.Result:
	case err := <-wait.Error:
		if ctx.Err() == nil {
			log.G(ctx).WithField("pod", st.key).WithError(err).Warn("wait for container")
		}
	}
	if ctx.Err() != nil {
		return nil, false
	}
	term := p.terminatedState(ctx, id)
	p.fallbackToLogs(ctx, st, c, term)
	return term, true
}

// recordExit records that container c ended as term and publishes the
// change; it reports whether the restart policy restarts c (it then waits in
// CrashLoopBackOff for backoff, its last state the one it ended in).
func (p *Provider) recordExit(ctx context.Context, st *podState, c *ctrState, term *corev1.ContainerStateTerminated, backoff time.Duration) bool {
	st.mu.Lock()
	policy, deleting := st.pod.Spec.RestartPolicy, st.deleting
	st.mu.Unlock()
	restart := shouldRestart(policy, c.init, term.ExitCode, deleting)
	if st.update(func() {
		c.ready = false
		c.state = corev1.ContainerState{Terminated: term}
		if restart {
			c.last = corev1.ContainerState{Terminated: term}
			c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason:  "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container %s", backoff, c.name),
			}}
		}
	}) {
		p.publish(st)
	}
	log.G(ctx).WithField("pod", st.key).Infof("container %s exited with %d (restart=%v)", c.name, term.ExitCode, restart)
	return restart
}

// stopContainer stops container i gracefully, as a kubelet kills a
// container: its preStop hook first, then SIGTERM and SIGKILL once the rest
// of the grace period is over. The supervisor then restarts it (used for
// image changes and failed liveness probes).
func (p *Provider) stopContainer(ctx context.Context, st *podState, i int, grace int) error {
	timeout := p.preStop(ctx, st, i, grace)
	id, _ := st.container(i)
	_, err := p.shared.Docker.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeout})
	return err
}

// killContainer stops container i of a pod being deleted for good: its
// preStop hook runs while the container, its probes and its supervisor
// carry on; then the supervisor and probes end and the container gets
// SIGTERM, SIGKILL after what is left of the grace period, and is removed.
func (p *Provider) killContainer(ctx context.Context, st *podState, i int, grace int) error {
	timeout := p.preStop(ctx, st, i, grace)
	if _, stop := st.container(i); stop != nil {
		stop()
	}
	return p.removeContainer(ctx, st, st.ctrs[i], timeout)
}

// container returns container i's Docker ID and the function that ends its supervisor.
func (st *podState) container(i int) (id string, stop context.CancelFunc) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ctrs[i].id, st.ctrs[i].stop
}

// removeContainer stops container c (SIGTERM, SIGKILL after grace seconds),
// records its final state and removes it.
func (p *Provider) removeContainer(ctx context.Context, st *podState, c *ctrState, grace int) error {
	st.mu.Lock()
	id := c.id
	st.mu.Unlock()
	if id == "" {
		return nil
	}
	if _, err := p.shared.Docker.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &grace}); err != nil && !cerrdefs.IsNotFound(err) {
		log.G(ctx).WithField("pod", st.key).WithError(err).Warn("stop container")
	}
	term := p.terminatedState(ctx, id)
	st.update(func() {
		c.ready = false
		c.state = corev1.ContainerState{Terminated: term}
	})
	_, err := p.shared.Docker.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	st.mu.Lock()
	if c.id == id {
		c.id = ""
	}
	st.mu.Unlock()
	return nil
}

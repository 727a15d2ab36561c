// Package loadbalancer is the dev cluster's implementation of Services of type LoadBalancer,
// the part a cloud provider (or MetalLB, or kind's cloud-provider-kind) plays in a real
// cluster. It runs in the nodes process: every LoadBalancer Service gets an address of its
// own on the host's loopback network (127.B.x.y, B fixed per dev cluster instance, so two
// instances on one host do not collide), written to status.loadBalancer.ingress, and on that
// address each of the Service's TCP ports accepts connections and forwards them, byte for
// byte, to one of the Service's ready endpoints as its EndpointSlices list them (pod IPs on
// the dev cluster's Docker network, which the host reaches). loadBalancerSourceRanges is
// honoured: a connection from outside them is closed unanswered.
//
// The addresses are reachable from the host only (a pod's 127.0.0.0/8 is its own), which is
// what the dev cluster's clients outside the cluster are: processes on the host.
package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// Config is what the load balancer needs.
type Config struct {
	Kube kubernetes.Interface
	// Instance is the dev cluster's instance name; it picks the second octet of the
	// addresses (Prefix).
	Instance string
	Logger   *slog.Logger
}

// Prefix is the /16 the instance's load-balancer addresses come from: 127.B.0.0/16 with B in
// 100..199, from the instance name.
func Prefix(instance string) netip.Prefix {
	h := fnv.New32a()
	_, _ = h.Write([]byte(instance))
	b := byte(100 + h.Sum32()%100)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{127, b, 0, 0}), 16)
}

// balancer is the running implementation: one entry per LoadBalancer Service.
type balancer struct {
	kube   kubernetes.Interface
	log    *slog.Logger
	prefix netip.Prefix
	slices discoverylisters.EndpointSliceLister

	mu       sync.Mutex
	services map[types.UID]*frontend
	used     map[netip.Addr]types.UID
}

// frontend is one Service's address and listeners.
type frontend struct {
	key       types.NamespacedName
	addr      netip.Addr
	listeners map[int32]net.Listener // by Service port
	// spec is what the listeners serve, swapped whole when the Service changes.
	spec atomic.Pointer[frontendSpec]
}

// frontendSpec is what a frontend's connections are checked and routed by.
type frontendSpec struct {
	ports  map[int32]corev1.ServicePort
	ranges []netip.Prefix
}

// Run serves LoadBalancer Services until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	factory := informers.NewSharedInformerFactory(cfg.Kube, 30*time.Second)
	svcInformer := factory.Core().V1().Services().Informer()
	sliceInformer := factory.Discovery().V1().EndpointSlices()
	b := &balancer{kube: cfg.Kube, log: log, prefix: Prefix(cfg.Instance), slices: sliceInformer.Lister(),
		services: map[types.UID]*frontend{}, used: map[netip.Addr]types.UID{}}
	_ = sliceInformer.Informer() // registered before Start, so the factory runs it
	queue := make(chan *corev1.Service, 256)
	enqueue := func(o any) {
		if s, ok := o.(*corev1.Service); ok {
			queue <- s
		}
	}
	_, err := svcInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if s, ok := o.(*corev1.Service); ok {
				b.release(s.UID)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("load balancer: caches did not sync: %w", ctx.Err())
		}
	}
	defer b.releaseAll()
	for {
		select {
		case <-ctx.Done():
			factory.Shutdown()
			return nil
		case s := <-queue:
			if err := b.sync(ctx, s); err != nil && ctx.Err() == nil {
				log.Warn("load balancer: service not served", "service", s.Namespace+"/"+s.Name, "error", err.Error())
				go func() {
					// Retried, as a controller's queue would, after a moment.
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
						if cur, err := svcInformer.GetIndexer().ByIndex(cache.NamespaceIndex, s.Namespace); err == nil {
							for _, o := range cur {
								if c, ok := o.(*corev1.Service); ok && c.UID == s.UID {
									queue <- c
								}
							}
						}
					}
				}()
			}
		}
	}
}

// sync brings one Service's frontend in line with it: made (address, listeners, status) for
// a LoadBalancer, released for anything else.
func (b *balancer) sync(ctx context.Context, s *corev1.Service) error {
	if s.Spec.Type != corev1.ServiceTypeLoadBalancer || s.DeletionTimestamp != nil {
		b.release(s.UID)
		return nil
	}
	spec := &frontendSpec{ports: map[int32]corev1.ServicePort{}}
	for _, p := range s.Spec.Ports {
		if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
			spec.ports[p.Port] = p
		}
	}
	for _, r := range s.Spec.LoadBalancerSourceRanges {
		if pr, err := netip.ParsePrefix(r); err == nil {
			spec.ranges = append(spec.ranges, pr.Masked())
		}
	}
	f, err := b.frontend(s)
	if err != nil {
		return err
	}
	f.spec.Store(spec)
	if err := b.listen(f, spec); err != nil {
		return err
	}
	return b.writeStatus(ctx, s, f.addr)
}

// frontend returns s's frontend, allocating its address: the one its status already holds
// when that is free and in the instance's range (the nodes process restarted), else the
// next free one.
func (b *balancer) frontend(s *corev1.Service) (*frontend, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f := b.services[s.UID]; f != nil {
		return f, nil
	}
	var addr netip.Addr
	for _, in := range s.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil && b.prefix.Contains(a) && b.used[a] == "" {
			addr = a
		}
	}
	if !addr.IsValid() {
		// 127.B.0.1 onwards: skip .0 and .255 of each /24, which some tools treat specially.
		for a := b.prefix.Addr().Next(); b.prefix.Contains(a); a = a.Next() {
			if last := a.As4()[3]; last != 0 && last != 255 && b.used[a] == "" {
				addr = a
				break
			}
		}
	}
	if !addr.IsValid() {
		return nil, fmt.Errorf("no free address left in %s", b.prefix)
	}
	f := &frontend{key: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, addr: addr, listeners: map[int32]net.Listener{}}
	b.services[s.UID], b.used[addr] = f, s.UID
	b.log.Info("load balancer: address assigned", "service", f.key.String(), "address", addr.String())
	return f, nil
}

// listen opens a listener for each of spec's ports f lacks, and closes those of ports gone.
func (b *balancer) listen(f *frontend, spec *frontendSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for port, l := range f.listeners {
		if _, ok := spec.ports[port]; !ok {
			_ = l.Close()
			delete(f.listeners, port)
		}
	}
	for port := range spec.ports {
		if f.listeners[port] != nil {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(f.addr.String(), strconv.Itoa(int(port))))
		if err != nil {
			return err
		}
		f.listeners[port] = l
		go b.accept(f, port, l)
	}
	return nil
}

// accept serves one listener until it is closed.
func (b *balancer) accept(f *frontend, port int32, l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				b.log.Warn("load balancer: accept", "service", f.key.String(), "error", err.Error())
			}
			return
		}
		go b.forward(f, port, c)
	}
}

// forward carries one client connection to one of the Service's ready endpoints, or closes
// it when the client is outside the source ranges or there is no endpoint.
func (b *balancer) forward(f *frontend, port int32, client net.Conn) {
	defer client.Close()
	spec := f.spec.Load()
	sp, ok := spec.ports[port]
	if !ok || !admitted(spec.ranges, client.RemoteAddr()) {
		return
	}
	target, ok := b.endpoint(f.key, sp)
	if !ok {
		return
	}
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite() // pass the half-close on, as a proxy does
		}
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}

// admitted reports whether remote is inside ranges (any when there are none).
func admitted(ranges []netip.Prefix, remote net.Addr) bool {
	if len(ranges) == 0 {
		return true
	}
	ap, err := netip.ParseAddrPort(remote.String())
	if err != nil {
		return false
	}
	for _, r := range ranges {
		if r.Contains(ap.Addr().Unmap()) {
			return true
		}
	}
	return false
}

// rr spreads connections over a Service's endpoints.
var rr atomic.Uint64

// endpoint picks a ready endpoint of the Service for port sp, as host:port.
func (b *balancer) endpoint(key types.NamespacedName, sp corev1.ServicePort) (string, bool) {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: key.Name})
	slices, err := b.slices.EndpointSlices(key.Namespace).List(sel)
	if err != nil {
		return "", false
	}
	var targets []string
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		var port int32
		for _, p := range s.Ports {
			if p.Port != nil && ptrString(p.Name) == sp.Name {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				targets = append(targets, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	if len(targets) == 0 {
		return "", false
	}
	return targets[rr.Add(1)%uint64(len(targets))], true
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// writeStatus records addr as the Service's ingress, unless it already is.
func (b *balancer) writeStatus(ctx context.Context, s *corev1.Service, addr netip.Addr) error {
	in := s.Status.LoadBalancer.Ingress
	if len(in) == 1 && in[0].IP == addr.String() && in[0].Hostname == "" {
		return nil
	}
	vip := corev1.LoadBalancerIPModeVIP
	cp := s.DeepCopy()
	cp.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addr.String(), IPMode: &vip}}
	_, err := b.kube.CoreV1().Services(s.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsConflict(err) {
		return nil // a newer version is on its way through the informer
	}
	return err
}

// release closes a Service's listeners and frees its address.
func (b *balancer) release(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.services[uid]
	if f == nil {
		return
	}
	for _, l := range f.listeners {
		_ = l.Close()
	}
	delete(b.services, uid)
	delete(b.used, f.addr)
	b.log.Info("load balancer: address released", "service", f.key.String(), "address", f.addr.String())
}

// releaseAll closes every listener (the process is stopping).
func (b *balancer) releaseAll() {
	b.mu.Lock()
	uids := make([]types.UID, 0, len(b.services))
	for uid := range b.services {
		uids = append(uids, uid)
	}
	b.mu.Unlock()
	for _, uid := range uids {
		b.release(uid)
	}
}

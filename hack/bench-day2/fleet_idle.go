package main

// The fleet's idle window: what the operator and the servers spend while nothing changes
// (the idle-* lines of fleet.go's scenario).

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomomento/valkey-operator/internal/promscrape"
	"github.com/gomomento/valkey-operator/internal/valkeycli"
	"github.com/gomomento/valkey-operator/reconciler/render"
)

// idleWindow measures the operator and the servers while nothing changes.
func (b *bench) idleWindow(ctx context.Context, names []string, usage *usage, formationRSS float64) error {
	servers, err := b.fleetServers(ctx, names)
	if err != nil {
		return err
	}
	cmdsBefore, err := commandCalls(ctx, servers)
	if err != nil {
		return err
	}
	// The Lease's changes are subtracted from the writes, so its watch brackets the API counts
	// with nothing between them: a renewal (every 2 s) made while the Valkey counts were read
	// between the two would otherwise be taken for one of the operator's own writes.
	leaseWrites, err := b.leaseWrites(ctx)
	if err != nil {
		return err
	}
	apiBefore, err := b.clientRequests(ctx)
	if err != nil {
		return err
	}
	serverBefore, err := b.apiserverWrites(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	logf("idle window of %s over %d servers", *fleetIdle, len(servers))
	select { // the window itself is what is measured
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(*fleetIdle):
	}
	minutes := time.Since(start).Minutes()
	apiAfter, err := b.clientRequests(ctx)
	if err != nil {
		return err
	}
	serverAfter, err := b.apiserverWrites(ctx)
	if err != nil {
		return err
	}
	lease := leaseWrites()
	cmdsAfter, err := commandCalls(ctx, servers)
	if err != nil {
		return err
	}
	idleRSS := usage.mark()
	workingSet, err := b.fleetOp.memoryWorkingSetMiB(ctx)
	if err != nil {
		return err
	}
	if err := b.saveHeapProfile(ctx); err != nil {
		return err
	}
	fmt.Printf("fleet: operator-rss-mib formation=%.1f idle=%.1f cpu-s=%.1f container-working-set-mib=%.1f\n",
		formationRSS, idleRSS, usage.cpuSeconds(), workingSet)
	writes := 0.0
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		writes += apiAfter[m] - apiBefore[m]
	}
	// Every change to the Lease is one request of the leader's (a renewal); the rest of the
	// writes are the operator's own.
	fmt.Printf("fleet: idle-api-writes=%.0f lease-writes-per-min=%.1f idle-api-reads-per-min=%.1f\n",
		writes-float64(lease), float64(lease)/minutes, (apiAfter["GET"]-apiBefore["GET"])/minutes)
	logf("idle window: writes kube-apiserver served, every client, by verb and resource: %s", countsChanged(serverBefore, serverAfter))
	var calls float64
	for addr, after := range cmdsAfter {
		calls += after - cmdsBefore[addr] - 2 // the sampler's own AUTH and INFO
	}
	fmt.Printf("fleet: idle-valkey-cmds-per-node-min=%.1f\n", calls/float64(len(servers))/minutes)
	return nil
}

// fleetServer is one server of the fleet and the operator password of its cluster.
type fleetServer struct{ addr, password string }

func (b *bench) fleetServers(ctx context.Context, names []string) ([]fleetServer, error) {
	var out []fleetServer
	for _, n := range names {
		pw, err := b.secret(ctx, fleetNamespace, render.AuthSecretName(n), render.AuthOperatorPasswordKey)
		if err != nil {
			return nil, err
		}
		ips, err := b.podIPs(ctx, fleetNamespace, n)
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			out = append(out, fleetServer{addr: ip, password: pw})
		}
	}
	return out, nil
}

// commandCalls sums INFO commandstats calls per server (valkey-cli: AUTH, then INFO).
func commandCalls(ctx context.Context, servers []fleetServer) (map[string]float64, error) {
	out := map[string]float64{}
	var mu sync.Mutex
	errs := make(chan error, len(servers))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			cmd := valkeycli.Command(cctx, s.password, "-h", s.addr, "--user", "operator", "INFO", "commandstats")
			text, err := cmd.Output()
			if err != nil {
				errs <- fmt.Errorf("INFO commandstats on %s: %w", s.addr, err)
				return
			}
			total := 0.0
			for _, line := range strings.Split(string(text), "\n") {
				if strings.HasPrefix(line, "cmdstat_replconf:") {
					continue // a replica's own once-a-second ACK to its primary, not the operator's
				}
				if _, rest, ok := strings.Cut(line, "calls="); ok && strings.HasPrefix(line, "cmdstat_") {
					v, _, _ := strings.Cut(rest, ",")
					n, _ := strconv.ParseFloat(v, 64)
					total += n
				}
			}
			mu.Lock()
			out[s.addr] = total
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	return out, <-errs
}

// clientRequests reads the operator's API requests that succeeded, by method, from its
// metrics endpoints, summed over its replicas (the standby's requests for the Lease are reads).
func (b *bench) clientRequests(ctx context.Context) (map[string]float64, error) {
	urls, err := b.fleetOp.metricsURLs(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, url := range urls {
		m, err := promscrape.Get(ctx, url)
		if err != nil {
			return nil, err
		}
		samples := m.Samples("rest_client_requests_total")
		if len(samples) == 0 {
			return nil, fmt.Errorf("no rest_client_requests_total on %s", url)
		}
		for _, s := range samples {
			// A request the server refused (a Lease renewal that lost a conflict, or timed
			// out) changed nothing: only what succeeded counts as a write.
			if strings.HasPrefix(s.Labels["code"], "2") {
				out[s.Labels["method"]] += s.Value
			}
		}
	}
	return out, nil
}

// apiserverWrites counts the writes kube-apiserver has served, from every client, by verb and
// resource (apiserver_request_total): what an idle-api-writes figure above zero was.
func (b *bench) apiserverWrites(ctx context.Context) (map[string]float64, error) {
	raw, err := b.env.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	m, err := promscrape.Parse(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	out := map[string]float64{}
	for _, s := range m.Samples("apiserver_request_total") {
		switch verb := s.Labels["verb"]; verb {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
			key := verb + " " + s.Labels["resource"]
			if sub := s.Labels["subresource"]; sub != "" {
				key += "/" + sub
			}
			out[key] += s.Value
		}
	}
	return out, nil
}

// countsChanged lists the keys whose count grew, with how much, in order.
func countsChanged(before, after map[string]float64) string {
	var parts []string
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, d))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

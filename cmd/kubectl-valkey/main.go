// Command kubectl-valkey is the `kubectl valkey` plugin: copy it onto PATH and kubectl finds
// it. It acts with the user's kubeconfig and RBAC (examples/plugin-rbac.yaml has a viewer and
// a requester ClusterRole):
//
//	kubectl valkey status CLUSTER [-n NS] [-o json]
//	kubectl valkey failover NODE [-n NS] [--wait 2m]
//	kubectl valkey rebalance CLUSTER [-n NS] [--wait 2m]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/gomomento/valkey-operator/internal/kubectlvalkey"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
)

const usage = `kubectl valkey: look at and act on Valkey clusters of the Valkey operator

  kubectl valkey status CLUSTER [-n NS] [-o json]   state, topology, every node as its server sees it
  kubectl valkey failover NODE [-n NS]              ask the operator to hand a primary's slots to a replica
  kubectl valkey rebalance CLUSTER [-n NS]          ask the operator to even out the slots

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the plugin with its arguments; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("kubectl-valkey", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	namespace := fs.StringP("namespace", "n", "", "the namespace (default: the kubeconfig context's)")
	output := fs.StringP("output", "o", "", "status output: text (default) or json")
	kubeconfig := fs.String("kubeconfig", "", "path to the kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
	kubeContext := fs.String("context", "", "the kubeconfig context to use")
	wait := fs.Duration("wait", 2*time.Minute, "how long failover and rebalance wait for the operator")
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 2
	}
	cmd, err := parseCommand(fs.Args(), *output)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n\n", err)
		fs.Usage()
		return 2
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *kubeContext})
	cfg, err := loader.ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	ns := *namespace
	if ns == "" {
		if ns, _, err = loader.Namespace(); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return 1
		}
	}
	c, err := kubectlvalkey.NewClient(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	switch cmd.verb {
	case "status":
		r, err := c.Status(ctx, ns, cmd.target)
		if err == nil {
			err = write(stdout, r, cmd.json)
		}
		return exit(stderr, err)
	case "failover":
		return exit(stderr, c.Failover(ctx, ns, cmd.target, *wait, stdout))
	default:
		return exit(stderr, c.Rebalance(ctx, ns, cmd.target, *wait, stdout))
	}
}

// command is a parsed command line.
type command struct {
	verb, target string
	json         bool
}

// parseCommand checks the verb, its one argument and the output format.
func parseCommand(args []string, output string) (command, error) {
	if len(args) == 0 {
		return command{}, errors.New("no command")
	}
	c := command{verb: args[0]}
	switch c.verb {
	case "status", "failover", "rebalance":
	default:
		return command{}, fmt.Errorf("unknown command %q", c.verb)
	}
	if len(args) != 2 {
		return command{}, fmt.Errorf("%s takes exactly one name", c.verb)
	}
	c.target = args[1]
	switch output {
	case "", "text":
	case "json":
		if c.verb != "status" {
			return command{}, fmt.Errorf("-o json is for status only")
		}
		c.json = true
	default:
		return command{}, fmt.Errorf("unknown output %q (text or json)", output)
	}
	return c, nil
}

func write(w io.Writer, r *kubectlvalkey.Report, asJSON bool) error {
	if !asJSON {
		return r.WriteText(w, time.Now())
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func exit(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "error: %v\n", err)
	return 1
}

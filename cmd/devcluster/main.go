// Command devcluster runs the project's local Kubernetes (see package
// devcluster).
//
//	devcluster up     start control plane and nodes in the background (idempotent)
//	devcluster down   stop everything and remove containers, network and state
//	devcluster status print whether the cluster answers
//
// Global flags: --root (repository root; found from the working directory by
// default) and --state-dir (default ROOT/.dev).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gomomento/valkey-operator/devcluster"
	"github.com/gomomento/valkey-operator/devcluster/vknodes"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: devcluster [--root DIR] [--state-dir DIR] up [--nodes N] | down | status")
}

func run(args []string) error {
	fs := flag.NewFlagSet("devcluster", flag.ContinueOnError)
	root := fs.String("root", "", "repository root (default: found from the working directory)")
	stateDir := fs.String("state-dir", "", "state directory (default ROOT/.dev)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usage()
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if cmd != "nodes" && *root == "" {
		r, err := devcluster.FindRoot()
		if err != nil {
			return err
		}
		*root = r
	}
	if *stateDir == "" && *root != "" {
		*stateDir = filepath.Join(*root, ".dev")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch cmd {
	case "up":
		return up(ctx, *root, *stateDir, rest)
	case "down":
		start := time.Now()
		if err := devcluster.Down(ctx, *stateDir); err != nil {
			return err
		}
		fmt.Printf("devcluster: down in %.1fs (processes stopped, containers/network/state removed)\n", time.Since(start).Seconds())
		return nil
	case "status":
		o, err := devcluster.LoadOptions(*stateDir)
		if err != nil {
			return fmt.Errorf("not running (no %s/cluster.json)", *stateDir)
		}
		fmt.Printf("instance %s, API server https://127.0.0.1:%d, kubeconfig %s\n", o.Instance, o.APIServerPort, filepath.Join(*stateDir, "kubeconfig"))
		return nil
	case "nodes":
		return nodes(ctx, rest)
	}
	return usage()
}

func up(ctx context.Context, root, stateDir string, args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	n := fs.Int("nodes", 6, "number of nodes")
	quiet := fs.Bool("quiet", false, "print only the kubeconfig path")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The nodes process is this binary; run it from a copy under the state
	// directory so `go run` (which deletes its binary on exit) works too.
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	self := filepath.Join(stateDir, "bin", "devcluster")
	if err := copyExecutable(exe, self); err != nil {
		return err
	}
	var logw io.Writer = os.Stderr
	if *quiet {
		logw = io.Discard
	}
	start := time.Now()
	c, err := devcluster.Up(ctx, devcluster.Options{
		Root: root, StateDir: stateDir, Nodes: *n, Detach: true,
		NodesCommand: []string{self, "nodes"}, Log: logw,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(logw, "devcluster: up in %.1fs; export KUBECONFIG=%s\n", time.Since(start).Seconds(), c.Kubeconfig)
	fmt.Println(c.Kubeconfig)
	return nil
}

// copyExecutable installs src at dst unless dst is already the same file;
// a running nodes process keeps its old inode when dst is replaced.
func copyExecutable(src, dst string) error {
	if si, err := os.Stat(src); err == nil {
		if di, err := os.Stat(dst); err == nil && os.SameFile(si, di) {
			return nil
		}
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func nodes(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("nodes", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "", "state directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o, err := devcluster.LoadOptions(*stateDir)
	if err != nil {
		return err
	}
	o.StateDir = *stateDir
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	err = vknodes.Run(ctx, devcluster.NodesConfig(o, logger), nil)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

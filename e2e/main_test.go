//go:build e2e

package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/gomomento/valkey-operator/devcluster"
	"github.com/gomomento/valkey-operator/devcluster/devtest"
)

// operatorNamespace holds the operator's settings ConfigMap (absent here: defaults apply).
const operatorNamespace = "valkey-operator-e2e"

// recheckInterval is the operator's re-check period for blocked clusters (missing config,
// Invalid). Shorter than the production default so "stays Creating over a few intervals"
// is observable in seconds; the bootstrap poll interval keeps its default.
const recheckInterval = 3 * time.Second

// slowStart is how long a new pod may take to turn ready before the operator warns
// (--slow-start; 3 minutes in production): short, so a stalled pod is reported within a test.
const slowStart = 20 * time.Second

// suite is what every test shares: one dev cluster and one operator process.
var suite struct {
	root     string
	env      *devtest.Env
	dyn      dynamic.Interface
	operator *operator
	bin, tmp string // the operator binary and the folder of its logs
	// operatorKubeconfig authenticates as the operator's ServiceAccount (install_test.go);
	// the tests' own kubectl keeps the admin kubeconfig.
	operatorKubeconfig string
	// inCluster is set while the operator runs from deploy/'s Deployment instead of operator.
	inCluster bool
	// pluginDir holds kubectl-valkey, the `kubectl valkey` plugin (plugin_test.go).
	pluginDir string
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		// On CI a skipped suite must not pass for a green one, as with a missing Docker engine.
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "e2e: -short given on CI (CI is set): the end-to-end suite must run there")
			return 1
		}
		fmt.Println("e2e: skipped in -short mode")
		return 0
	}
	root, err := devcluster.FindRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	suite.root = root
	if err := preflight(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: prerequisites missing:", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "valkey-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	code := 1
	defer func() {
		if code == 0 && os.Getenv("E2E_KEEP") == "" {
			_ = os.RemoveAll(tmp)
		} else {
			fmt.Printf("e2e: operator log kept in %s\n", filepath.Join(tmp, "manager.log"))
		}
	}()

	// Build first: a compile error then costs no cluster start (and on two shared cores,
	// building in parallel with the start-up gains nothing).
	start := time.Now()
	bin := filepath.Join(tmp, "manager")
	build := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building cmd/manager: %v\n%s", err, out)
		return 1
	}
	// The kubectl plugin, in a folder of its own that plugin tests put on kubectl's PATH.
	suite.pluginDir = filepath.Join(tmp, "plugin")
	build = exec.Command("go", "build", "-o", filepath.Join(suite.pluginDir, "kubectl-valkey"), "./cmd/kubectl-valkey")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building cmd/kubectl-valkey: %v\n%s", err, out)
		return 1
	}
	fmt.Printf("e2e: operator and kubectl plugin built in %.1fs\n", time.Since(start).Seconds())

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	start = time.Now()
	env, stopCluster, err := devtest.New(ctx, devtest.Options{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: dev cluster:", err)
		return 1
	}
	fmt.Printf("e2e: dev cluster up in %.1fs (instance %s)\n", time.Since(start).Seconds(), env.Instance)
	code = withCluster(m, env, bin, tmp)
	if err := stopCluster(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: dev cluster teardown:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// withCluster installs the CRDs with kubectl, starts the operator and runs the tests; the
// operator is stopped before the cluster goes away.
func withCluster(m *testing.M, env *devtest.Env, bin, tmp string) int {
	suite.env, suite.bin, suite.tmp = env, bin, tmp
	dyn, err := dynamic.NewForConfig(env.REST)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	suite.dyn = dyn
	if out, err := kubectlRun("", "apply", "-f", filepath.Join(suite.root, "crds")); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: kubectl apply -f crds/: %v\n%s", err, out)
		return 1
	}
	if out, err := kubectlRun("", "wait", "--for=condition=established", "--timeout=60s", "crd", "--all"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: CRDs not established: %v\n%s", err, out)
		return 1
	}
	if err := env.EnsureNamespace(context.Background(), operatorNamespace); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := noOtherOperator(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	deployed, err := installDeploy()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	code := withDeploy(m, env, bin, tmp)
	if err := uninstallClusterScoped(deployed); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: removing deploy/'s cluster-scoped objects:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// withDeploy runs the operator under its ServiceAccount, once deploy/'s policies are in
// force, and runs the tests.
func withDeploy(m *testing.M, env *devtest.Env, bin, tmp string) int {
	suite.operatorKubeconfig = filepath.Join(tmp, "operator.kubeconfig")
	if err := writeOperatorKubeconfig(env.Kubeconfig, suite.operatorKubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := waitPoliciesInForce(30 * time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := waitSchedulable(env, 60*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	op, err := startOperator(bin, suite.operatorKubeconfig, filepath.Join(tmp, "manager.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: operator:", err)
		return 1
	}
	suite.operator = op
	code := m.Run()
	if err := suite.operator.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: operator stop:", err)
		if code == 0 {
			code = 1
		}
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e: operator log tail:\n%s\n", suite.operator.Tail(60))
	}
	return code
}

// preflight names what is missing instead of failing obscurely later.
func preflight() error {
	for _, tool := range []string{"kubectl", "valkey-cli", "docker", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not on PATH (make prerequisites)", tool)
		}
	}
	image := os.Getenv("VALKEY_IMAGE")
	if image == "" {
		image = devcluster.DefaultValkeyImage
	}
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", image).CombinedOutput(); err != nil {
		return fmt.Errorf("valkey image %s not present (hack/valkey-image/build.sh): %v: %s", image, err, out)
	}
	if _, err := os.Stat(filepath.Join(suite.root, "bin", "controlplane", "kube-apiserver")); err != nil {
		return fmt.Errorf("bin/controlplane not built (hack/build-controlplane.sh): %w", err)
	}
	return nil
}

// waitSchedulable waits until no node carries a NoSchedule/NoExecute taint: pods created
// before then sit in the scheduler's back-off, which would pollute the apply-to-Active figure.
func waitSchedulable(env *devtest.Env, timeout time.Duration) error {
	start := time.Now()
	err := env.WaitSchedulable(context.Background(), timeout)
	if err == nil {
		fmt.Printf("e2e: nodes schedulable after %.1fs more\n", time.Since(start).Seconds())
	}
	return err
}

// noOtherOperator refuses to run next to the operator `make dev` started (DEVCLUSTER_REUSE=1),
// in the cluster or on the host: two operators reconciling the same clusters would make every
// result meaningless.
func noOtherOperator() error {
	if os.Getenv("DEVCLUSTER_REUSE") != "1" {
		return nil
	}
	if out, err := kubectlRun("", "get", "deployment", "valkey-operator", "-n", "valkey-operator", "--ignore-not-found",
		"-o", "jsonpath={.spec.replicas}"); err == nil && strings.TrimSpace(out) != "" && strings.TrimSpace(out) != "0" {
		return errors.New("the dev operator runs in the cluster (deployment valkey-operator/valkey-operator); stop it first " +
			"(kubectl -n valkey-operator scale deployment valkey-operator --replicas=0): the e2e tests run their own")
	}
	pidFile := filepath.Join(suite.root, ".dev", "pids", "manager.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	if syscall.Kill(pid, 0) == nil {
		return fmt.Errorf("the dev operator (pid %d, %s) is running; stop it first: the e2e tests run their own", pid, pidFile)
	}
	return nil
}

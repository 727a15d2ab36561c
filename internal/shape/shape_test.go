// Package shape checks the repository's structural rules, the ones issue #21 set so that a
// reader can hold each file and each port in mind: they are easy to break one commit at a
// time (restore's BootstrapSlots once took valkeyops/bootstrap.go to 458 lines), so a test
// holds them rather than a note.
package shape

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the repository, two levels up from this package.
const root = "../.."

const (
	maxFileLines        = 450 // non-test Go files of reconciler/ and valkeyops/
	maxInterfaceMethods = 8   // interfaces (ports) declared in reconciler/
)

// goFiles lists the Go files under dir (relative to root), test files only if tests.
func goFiles(t *testing.T, dir string, tests bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		if tests || !strings.HasSuffix(p, "_test.go") {
			out = append(out, p)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, out, "no Go files under %s", dir)
	return out
}

func TestNoLongFilesInReconcilerOrValkeyops(t *testing.T) {
	for _, dir := range []string{"reconciler", "valkeyops"} {
		for _, p := range goFiles(t, dir, false) {
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			lines := bytes.Count(b, []byte("\n"))
			assert.LessOrEqual(t, lines, maxFileLines, "%s has %d lines: split it by job", p, lines)
		}
	}
}

func TestReconcilerPortsStayNarrow(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	for _, p := range goFiles(t, "reconciler", false) {
		f, err := parser.ParseFile(fset, p, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			if it, ok := ts.Type.(*ast.InterfaceType); ok {
				seen++
				assert.LessOrEqual(t, len(it.Methods.List), maxInterfaceMethods,
					"%s: interface %s has %d methods: a new concern adds a port of its own", p, ts.Name.Name, len(it.Methods.List))
			}
			return true
		})
	}
	require.NotZero(t, seen, "found no interface in reconciler/: the walk is broken")
}

// Comments point at documents in this repository (docs/), never at ones a reader cannot open.
func TestNoCitationsOfDocumentsOutsideTheRepository(t *testing.T) {
	for _, p := range goFiles(t, ".", true) {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.NotContains(t, string(b), "SPEC "+"§", "%s cites SPEC sections: cite docs/ instead", p)
	}
}

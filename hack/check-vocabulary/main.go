// Command check-vocabulary fails when berth's production code spells a label, annotation,
// gate, taint or tag key as a string literal outside api/v1alpha1, where berth's whole
// vocabulary is defined once (wellknown.go, conditions.go). Keys of Kubernetes and Karpenter
// come from their Go packages. Test files and the tools modules are not checked.
//
// Usage: go run ./hack/check-vocabulary [dir]   (default: the current directory)
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// keyShape matches a qualified Kubernetes key ("prefix.example/name", or a bare "prefix/" of a
// label family) and the bare annotation keys of other schedulers berth reads.
var keyShape = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)

// vocabularyDir is the one package allowed to spell keys.
const vocabularyDir = "api/v1alpha1"

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	found, err := check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check-vocabulary:", err)
		os.Exit(2)
	}
	for _, f := range found {
		fmt.Println(f)
	}
	if len(found) > 0 {
		fmt.Fprintf(os.Stderr, "check-vocabulary: %d key(s) spelled outside %s: define them in %s/wellknown.go (or use the Kubernetes/Karpenter constant) and refer to the constant\n", len(found), vocabularyDir, vocabularyDir)
		os.Exit(1)
	}
}

// check returns "file:line: key" for every key-shaped string literal in non-test Go files
// under root, outside the vocabulary package and the nested modules (hack/tools, hack/image:
// build tooling with no keys of berth's).
func check(root string) ([]string, error) {
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == vocabularyDir, strings.HasPrefix(rel, ".") && rel != ".", rel == "test":
				return filepath.SkipDir
			case rel != ".":
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", path, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ImportSpec, *ast.Field:
				return false // import paths; struct tags
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if _, _, notCIDR := net.ParseCIDR(s); err == nil && keyShape.MatchString(s) && notCIDR != nil {
					out = append(out, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), s))
				}
			}
			return true
		})
		return nil
	})
	return out, err
}

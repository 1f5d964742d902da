// Package layering holds the test that keeps kgate's package dependencies pointing one way:
// cmd -> configs, gateway; gateway -> coordinator, redisstore, protocol; the leaves import no kgate
// package; go-redis lives in redisstore and koanf in configs.
package layering

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/kgate/kgate/"

// allowed lists, per package directory, the kgate packages its production code may import.
var allowed = map[string][]string{
	"protocol":           {},
	"redisstore":         {},
	"coordinator":        {},
	"configs":            {},
	"gateway":            {"coordinator", "redisstore", "protocol"},
	"cmd/kgate":          {"configs", "gateway", "coordinator", "redisstore"},
	"cmd/kgate-probe":    {},
	"cmd/kgate-bench":    {"gateway", "coordinator", "redisstore", "protocol", "internal/redistest"},
	"internal/redistest": {},
	"internal/benchrec":  {},
}

// thirdParty limits where some libraries may be imported (production code only).
var thirdParty = map[string][]string{
	"github.com/redis/go-redis/v9": {"redisstore", "cmd/kgate-bench"},
	"github.com/knadh/koanf":       {"configs"},
}

func TestLayering(t *testing.T) {
	root := "../.."
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "node_modules" || name == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		if rel == "integration" || strings.HasPrefix(rel, "internal/layering") {
			return nil
		}
		allow, known := allowed[rel]
		if !known {
			t.Errorf("%s: package %s is not in the layering table; add it with its allowed imports", path, rel)
			return nil
		}
		seen[rel] = true
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if dep, ok := strings.CutPrefix(p, module); ok {
				if !contains(allow, dep) {
					t.Errorf("%s imports %s: %s may import only %v", path, p, rel, allow)
				}
			}
			for lib, where := range thirdParty {
				if strings.HasPrefix(p, lib) && !contains(where, rel) {
					t.Errorf("%s imports %s, which belongs in %v only", path, p, where)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"protocol", "redisstore", "coordinator", "configs", "gateway", "cmd/kgate"} {
		if !seen[must] {
			t.Errorf("package %s not found: is the test walking the right tree?", must)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

package gateway

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestCompatibilityMatrixMatchesAPIs: docs/COMPATIBILITY.md's support matrix lists every API of
// supportedAPIs with the versions served, and Produce's wider listed range, and nothing else.
func TestCompatibilityMatrixMatchesAPIs(t *testing.T) {
	doc, err := os.ReadFile("../docs/COMPATIBILITY.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| *(\d+) \| [A-Za-z]+ \| (\d+)(?:-(\d+))?(?: \((\d+)-(\d+) listed\))? \|`)
	advertised := map[int16][2]int16{}
	for _, k := range advertisedAPIs() {
		advertised[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	num := func(s, or string) int16 {
		if s == "" {
			s = or
		}
		n, _ := strconv.Atoi(s)
		return int16(n)
	}
	seen := map[int16]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		key := num(m[1], "")
		served := [2]int16{num(m[2], ""), num(m[3], m[2])}
		listed := served
		if m[4] != "" {
			listed = [2]int16{num(m[4], ""), num(m[5], "")}
		}
		a, ok := supportedAPIs[key]
		switch {
		case !ok:
			t.Errorf("COMPATIBILITY.md lists key %d, which kgate does not serve", key)
		case served != [2]int16{a.min, a.max}:
			t.Errorf("COMPATIBILITY.md: key %d versions %d-%d, served %d-%d", key, served[0], served[1], a.min, a.max)
		case listed != advertised[key]:
			t.Errorf("COMPATIBILITY.md: key %d listed as %d-%d, ApiVersions lists %d-%d", key, listed[0], listed[1], advertised[key][0], advertised[key][1])
		}
		seen[key] = true
	}
	for key := range supportedAPIs {
		if !seen[key] {
			t.Errorf("key %d is served but not in COMPATIBILITY.md's matrix", key)
		}
	}
}

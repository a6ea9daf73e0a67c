package kubecmd

import (
	"bytes"
	"strings"
	"testing"
)

type row struct {
	Name  string            `json:"name"`
	Node  string            `json:"node,omitempty"`
	Label map[string]string `json:"labels,omitempty"`
}

type report struct {
	Title string `json:"title"`
	Rows  []row  `json:"rows"`
}

// TestParseOutput: kubectl's -o values, templates parsed before anything is read.
func TestParseOutput(t *testing.T) {
	for in, ok := range map[string]bool{
		"text": true, "wide": true, "name": true, "json": true, "yaml": true,
		"jsonpath={.title}": true, "jsonpath=.title": true, "custom-columns=NAME:.name,NODE:.node": true,
		"table": false, "jsonpath=": false, "jsonpath={.title": false, "custom-columns=NAME": false, "custom-columns=:.name": false, "wide=x": false,
	} {
		_, err := parseOutput(in)
		if (err == nil) != ok {
			t.Errorf("parseOutput(%q) = %v, want ok %v", in, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "-o") {
			t.Errorf("parseOutput(%q) error %q does not name -o", in, err)
		}
	}
}

// TestPrintTemplate: jsonpath over the whole output by its JSON names; custom columns over its
// rows, <none> for what a row lacks, headers optional.
func TestPrintTemplate(t *testing.T) {
	r := report{Title: "gang g", Rows: []row{{Name: "g-0", Node: "n1", Label: map[string]string{"rank": "0"}}, {Name: "g-1"}}}
	var b bytes.Buffer
	o, err := parseOutput("jsonpath={.title}: {.rows[*].name}")
	if err != nil {
		t.Fatal(err)
	}
	if err := printTemplate(&b, r, r.Rows, o, false); err != nil || b.String() != "gang g: g-0 g-1\n" {
		t.Errorf("jsonpath: %q, %v", b.String(), err)
	}
	b.Reset()
	o, _ = parseOutput("custom-columns=MEMBER:.name,NODE:.node,RANK:.labels.rank")
	if err := printTemplate(&b, r, r.Rows, o, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || strings.Fields(lines[0])[0] != "MEMBER" || strings.Join(strings.Fields(lines[1]), " ") != "g-0 n1 0" ||
		strings.Join(strings.Fields(lines[2]), " ") != "g-1 <none> <none>" {
		t.Errorf("custom-columns:\n%s", b.String())
	}
	b.Reset()
	if err := printTemplate(&b, r, r.Rows, o, true); err != nil || strings.Contains(b.String(), "MEMBER") || strings.Count(b.String(), "\n") != 2 {
		t.Errorf("custom-columns --no-headers:\n%s (%v)", b.String(), err)
	}
}

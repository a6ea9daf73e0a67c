package kubecmd

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"k8s.io/client-go/util/jsonpath"
)

// outputFormats are the -o values of berth's client commands: their text, kubectl's wide (the
// text with more columns), name (kind/name of each object, for xargs), json and yaml, and
// kubectl's templates: jsonpath=TEMPLATE and custom-columns=HEADER:.path,... (one row per finding
// of doctor, per member of why).
var outputFormats = []string{"text", "wide", "name", "json", "yaml", "jsonpath=TEMPLATE", "custom-columns=HEADER:.path,..."}

// output is a parsed -o value: its kind (text, wide, name, json, yaml, jsonpath, custom-columns)
// and, for the templates, the template.
type output struct {
	kind, template string
}

// parseOutput reads an -o value, refusing what is no format with the list of formats.
func parseOutput(s string) (output, error) {
	kind, tmpl, hasTemplate := strings.Cut(s, "=")
	switch {
	case !hasTemplate && (kind == "text" || kind == "wide" || kind == "name" || kind == "json" || kind == "yaml"):
		return output{kind: kind}, nil
	case hasTemplate && (kind == "jsonpath" || kind == "custom-columns") && tmpl != "":
		o := output{kind: kind, template: tmpl}
		// Parse now: a bad template is an error before anything is read from the cluster.
		if kind == "jsonpath" {
			_, err := newJSONPath(tmpl)
			return o, err
		}
		_, err := parseColumns(tmpl)
		return o, err
	}
	return output{}, fmt.Errorf("-o: %q is not a format (%s)", s, strings.Join(outputFormats, ", "))
}

// newJSONPath parses a kubectl-style jsonpath template: braces optional around a single path.
func newJSONPath(tmpl string) (*jsonpath.JSONPath, error) {
	if !strings.Contains(tmpl, "{") {
		tmpl = "{" + tmpl + "}"
	}
	jp := jsonpath.New("output")
	if err := jp.Parse(tmpl); err != nil {
		return nil, fmt.Errorf("-o jsonpath: %w", err)
	}
	return jp, nil
}

// column is one custom column: its header and the jsonpath of its value in a row.
type column struct {
	header string
	path   *jsonpath.JSONPath
}

// parseColumns reads HEADER:.path,HEADER:.path.
func parseColumns(spec string) ([]column, error) {
	var out []column
	for _, part := range strings.Split(spec, ",") {
		header, path, ok := strings.Cut(part, ":")
		if !ok || header == "" || path == "" {
			return nil, fmt.Errorf("-o custom-columns: %q is not HEADER:.path", part)
		}
		jp, err := newJSONPath(path)
		if err != nil {
			return nil, fmt.Errorf("-o custom-columns %s: %w", header, err)
		}
		jp.AllowMissingKeys(true)
		out = append(out, column{header: header, path: jp})
	}
	return out, nil
}

// generic turns v into what encoding/json makes of its JSON: the field names a jsonpath
// template addresses are the JSON ones (-o json shows them).
func generic(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding the output: %w", err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("encoding the output: %w", err)
	}
	return out, nil
}

// printTemplate writes v through o's jsonpath template, or its rows as o's custom columns
// (headers unless noHeaders).
func printTemplate(w io.Writer, v any, rows any, o output, noHeaders bool) error {
	if o.kind == "jsonpath" {
		jp, err := newJSONPath(o.template)
		if err != nil {
			return err
		}
		data, err := generic(v)
		if err != nil {
			return err
		}
		if err := jp.Execute(w, data); err != nil {
			return fmt.Errorf("-o jsonpath: %w", err)
		}
		_, err = fmt.Fprintln(w)
		return err
	}
	cols, err := parseColumns(o.template)
	if err != nil {
		return err
	}
	data, err := generic(rows)
	if err != nil {
		return err
	}
	list, _ := data.([]any)
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	if !noHeaders {
		headers := make([]string, len(cols))
		for i, c := range cols {
			headers[i] = c.header
		}
		fmt.Fprintln(tw, strings.Join(headers, "\t"))
	}
	for _, row := range list {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = "<none>"
			results, err := c.path.FindResults(row)
			if err != nil || len(results) == 0 || len(results[0]) == 0 {
				continue
			}
			var vals []string
			for _, r := range results[0] {
				vals = append(vals, fmt.Sprint(r.Interface()))
			}
			cells[i] = strings.Join(vals, ",")
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

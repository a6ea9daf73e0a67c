package nodepools

import (
	"encoding/json"
	"fmt"
	"io"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/yaml"
)

// The output formats of Encode.
const (
	// FormatYAML is a multi-document YAML stream, each document starting with "---".
	FormatYAML = "yaml"
	// FormatJSON is one JSON v1 List holding every object (what kubectl apply -f takes).
	FormatJSON = "json"
)

// Formats lists the accepted output formats.
var Formats = []string{FormatYAML, FormatJSON}

// scheme knows the kinds Render produces, to fill in TypeMeta.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(NodePoolGroupVersion, &karpv1.NodePool{})
	s.AddKnownTypes(EC2NodeClassGroupVersion, &awsv1.EC2NodeClass{})
	s.AddKnownTypes(KWOKNodeClassGroupVersion, &kwokv1alpha1.KWOKNodeClass{})
	return s
}()

// Encode writes objs to w in format (FormatYAML or FormatJSON), as manifests to apply:
// apiVersion and kind set, no status, no null fields (creationTimestamp and the like).
func Encode(w io.Writer, objs []client.Object, format string) error {
	docs := make([]map[string]any, 0, len(objs))
	for _, o := range objs {
		doc, err := manifest(o)
		if err != nil {
			return err
		}
		docs = append(docs, doc)
	}
	switch format {
	case FormatYAML:
		for _, d := range docs {
			data, err := yaml.Marshal(d)
			if err != nil {
				return fmt.Errorf("encoding %s %s as YAML: %w", d["kind"], name(d), err)
			}
			if _, err := fmt.Fprintf(w, "---\n%s", data); err != nil {
				return fmt.Errorf("writing manifests: %w", err)
			}
		}
		return nil
	case FormatJSON:
		list := map[string]any{"apiVersion": "v1", "kind": "List", "items": docs}
		data, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding manifests as JSON: %w", err)
		}
		if _, err := fmt.Fprintf(w, "%s\n", data); err != nil {
			return fmt.Errorf("writing manifests: %w", err)
		}
		return nil
	default:
		return fmt.Errorf("unknown output format %q (accepted: yaml, json)", format)
	}
}

// manifest turns an object into the map that is printed.
func manifest(o client.Object) (map[string]any, error) {
	o = o.DeepCopyObject().(client.Object)
	gvk, err := apiutil.GVKForObject(o, scheme)
	if err != nil {
		return nil, fmt.Errorf("type of %T %s: %w", o, o.GetName(), err)
	}
	o.GetObjectKind().SetGroupVersionKind(gvk)
	data, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s: %w", gvk.Kind, o.GetName(), err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("decoding %s %s: %w", gvk.Kind, o.GetName(), err)
	}
	// Status belongs to the controllers; an empty one would only be noise.
	delete(doc, "status")
	pruneNulls(doc)
	return doc, nil
}

// pruneNulls drops null fields (creationTimestamp, slices without omitempty) at every depth.
func pruneNulls(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if x == nil {
				delete(v, k)
				continue
			}
			pruneNulls(x)
		}
	case []any:
		for _, x := range v {
			pruneNulls(x)
		}
	}
}

func name(doc map[string]any) any {
	if md, ok := doc["metadata"].(map[string]any); ok {
		return md["name"]
	}
	return nil
}

package examples

// A structural validator for the subset of OpenAPI v3 that Kubernetes CRDs
// use (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
// custom-resource-definitions/#specifying-a-structural-schema). It rejects
// what the API server rejects with field validation "Strict" (kubectl's
// default since 1.27): unknown fields, wrong types, enum and bound
// violations, missing required fields. It does not evaluate CEL rules
// (x-kubernetes-validations) or apply defaults.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
)

// schema is one node of an openAPIV3Schema.
type schema struct {
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	AdditionalProperties *boolOrSchema      `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	Enum                 []json.RawMessage  `json:"enum"`
	MaxLength            *int64             `json:"maxLength"`
	MinLength            *int64             `json:"minLength"`
	MaxItems             *int64             `json:"maxItems"`
	MinItems             *int64             `json:"minItems"`
	MaxProperties        *int64             `json:"maxProperties"`
	MinProperties        *int64             `json:"minProperties"`
	Minimum              *float64           `json:"minimum"`
	Maximum              *float64           `json:"maximum"`
	ExclusiveMinimum     bool               `json:"exclusiveMinimum"`
	ExclusiveMaximum     bool               `json:"exclusiveMaximum"`
	Pattern              string             `json:"pattern"`
	AnyOf                []*schema          `json:"anyOf"`
	AllOf                []*schema          `json:"allOf"`
	OneOf                []*schema          `json:"oneOf"`
	Nullable             bool               `json:"nullable"`
	IntOrString          bool               `json:"x-kubernetes-int-or-string"`
	PreserveUnknown      bool               `json:"x-kubernetes-preserve-unknown-fields"`
	EmbeddedResource     bool               `json:"x-kubernetes-embedded-resource"`
	ListType             string             `json:"x-kubernetes-list-type"`
	ListMapKeys          []string           `json:"x-kubernetes-list-map-keys"`

	patternOnce sync.Once
	patternRE   *regexp.Regexp
	patternErr  error
}

// boolOrSchema is additionalProperties: false, true, or a schema.
type boolOrSchema struct {
	Allows bool
	Schema *schema
}

func (b *boolOrSchema) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch string(data) {
	case "true":
		b.Allows = true
		return nil
	case "false":
		b.Allows = false
		return nil
	}
	b.Allows = true
	b.Schema = new(schema)
	return json.Unmarshal(data, b.Schema)
}

// crd is the part of a CustomResourceDefinition the validator needs.
type crd struct {
	Kind string `json:"kind"`
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Served bool   `json:"served"`
			Schema struct {
				OpenAPIV3Schema *schema `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// gvk is "group/version, Kind", e.g. "kubeflow.org/v2beta1, MPIJob".
type gvk struct{ APIVersion, Kind string }

func (g gvk) String() string { return g.APIVersion + ", Kind=" + g.Kind }

// loadCRD reads a CRD file and returns its served versions' schemas.
func loadCRD(path string) (map[gvk]*schema, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading CRD: %w", err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("CRD %s: %w", path, err)
	}
	var c crd
	if err := json.Unmarshal(js, &c); err != nil {
		return nil, fmt.Errorf("CRD %s: %w", path, err)
	}
	if c.Kind != "CustomResourceDefinition" || c.Spec.Group == "" || c.Spec.Names.Kind == "" {
		return nil, fmt.Errorf("CRD %s: not a CustomResourceDefinition with group and names.kind", path)
	}
	out := map[gvk]*schema{}
	for _, v := range c.Spec.Versions {
		if !v.Served {
			continue
		}
		if v.Schema.OpenAPIV3Schema == nil {
			return nil, fmt.Errorf("CRD %s version %s: no openAPIV3Schema", path, v.Name)
		}
		out[gvk{c.Spec.Group + "/" + v.Name, c.Spec.Names.Kind}] = v.Schema.OpenAPIV3Schema
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("CRD %s: no served version", path)
	}
	return out, nil
}

// decodeJSON decodes JSON keeping numbers as json.Number, so that 1 and 1.5
// stay distinguishable (integer vs number).
func decodeJSON(js []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// validateObject validates a whole custom resource: apiVersion, kind and
// metadata as the API server treats them, the rest against s.
func validateObject(s *schema, obj map[string]any) []string {
	var errs []string
	for k, v := range obj {
		switch k {
		case "apiVersion", "kind":
			if _, ok := v.(string); !ok {
				errs = append(errs, fmt.Sprintf("%s: want string, got %s", k, describe(v)))
			}
		case "metadata":
			// The root metadata is an ObjectMeta whatever the CRD says;
			// validateMetadata decodes it strictly into metav1.ObjectMeta.
		default:
			p, ok := s.Properties[k]
			if !ok {
				errs = append(errs, fmt.Sprintf("%s: unknown field", k))
				continue
			}
			errs = append(errs, validate(p, k, v)...)
		}
	}
	for _, r := range s.Required {
		if _, ok := obj[r]; !ok {
			errs = append(errs, fmt.Sprintf("%s: required field missing", r))
		}
	}
	sort.Strings(errs)
	return errs
}

// validate checks v against s; path names v in error messages.
func validate(s *schema, path string, v any) []string {
	if v == nil {
		if s.Nullable {
			return nil
		}
		return []string{path + ": null is not allowed"}
	}
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, a...)) }

	if s.IntOrString {
		switch x := v.(type) {
		case string:
		case json.Number:
			if _, err := strconv.ParseInt(x.String(), 10, 64); err != nil {
				add("want integer or string, got %s", describe(v))
			}
		default:
			add("want integer or string, got %s", describe(v))
		}
	} else if s.Type != "" && !typeMatches(s.Type, v) {
		add("want %s, got %s", s.Type, describe(v))
		return errs
	}

	switch x := v.(type) {
	case string:
		n := int64(len([]rune(x)))
		if s.MaxLength != nil && n > *s.MaxLength {
			add("length %d exceeds maxLength %d", n, *s.MaxLength)
		}
		if s.MinLength != nil && n < *s.MinLength {
			add("length %d is below minLength %d", n, *s.MinLength)
		}
		if s.Pattern != "" {
			re, err := s.pattern()
			if err != nil {
				add("schema pattern %q does not compile: %v", s.Pattern, err)
			} else if !re.MatchString(x) {
				add("%q does not match pattern %s", x, s.Pattern)
			}
		}
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			add("bad number %s", x)
			break
		}
		if s.Type == "integer" {
			switch s.Format {
			case "int32":
				if f < math.MinInt32 || f > math.MaxInt32 {
					add("%s overflows int32", x)
				}
			}
		}
		if s.Minimum != nil && (f < *s.Minimum || (s.ExclusiveMinimum && f == *s.Minimum)) {
			add("%s is below minimum %g", x, *s.Minimum)
		}
		if s.Maximum != nil && (f > *s.Maximum || (s.ExclusiveMaximum && f == *s.Maximum)) {
			add("%s is above maximum %g", x, *s.Maximum)
		}
	case []any:
		n := int64(len(x))
		if s.MaxItems != nil && n > *s.MaxItems {
			add("%d items exceed maxItems %d", n, *s.MaxItems)
		}
		if s.MinItems != nil && n < *s.MinItems {
			add("%d items are below minItems %d", n, *s.MinItems)
		}
		if s.Items != nil {
			for i, it := range x {
				errs = append(errs, validate(s.Items, fmt.Sprintf("%s[%d]", path, i), it)...)
			}
		}
		errs = append(errs, checkListType(s, path, x)...)
	case map[string]any:
		errs = append(errs, validateMap(s, path, x)...)
	}

	if len(s.Enum) > 0 && !enumContains(s.Enum, v) {
		var vals []string
		for _, e := range s.Enum {
			vals = append(vals, string(e))
		}
		add("%s is not one of [%s]", describe(v), strings.Join(vals, ", "))
	}
	for _, sub := range s.AllOf {
		errs = append(errs, validate(valueOnly(sub), path, v)...)
	}
	if len(s.AnyOf) > 0 && !s.IntOrString {
		ok := false
		for _, sub := range s.AnyOf {
			if len(validate(valueOnly(sub), path, v)) == 0 {
				ok = true
				break
			}
		}
		if !ok {
			add("matches none of the anyOf alternatives")
		}
	}
	if len(s.OneOf) > 0 {
		n := 0
		for _, sub := range s.OneOf {
			if len(validate(valueOnly(sub), path, v)) == 0 {
				n++
			}
		}
		if n != 1 {
			add("matches %d of the oneOf alternatives, want exactly 1", n)
		}
	}
	return errs
}

// valueOnly returns the value validations of a junctor branch (anyOf,
// allOf, oneOf): in a structural schema they carry no properties of their
// own, so unknown-field checks there would reject every field.
func valueOnly(s *schema) *schema {
	c := &schema{
		Type: s.Type, Format: s.Format, Required: s.Required, Enum: s.Enum, Pattern: s.Pattern,
		MaxLength: s.MaxLength, MinLength: s.MinLength, MaxItems: s.MaxItems, MinItems: s.MinItems,
		MaxProperties: s.MaxProperties, MinProperties: s.MinProperties, Minimum: s.Minimum, Maximum: s.Maximum,
		ExclusiveMinimum: s.ExclusiveMinimum, ExclusiveMaximum: s.ExclusiveMaximum,
		AnyOf: s.AnyOf, AllOf: s.AllOf, OneOf: s.OneOf, Nullable: s.Nullable, PreserveUnknown: true,
		Items: s.Items,
	}
	return c
}

func validateMap(s *schema, path string, m map[string]any) []string {
	var errs []string
	n := int64(len(m))
	if s.MaxProperties != nil && n > *s.MaxProperties {
		errs = append(errs, fmt.Sprintf("%s: %d properties exceed maxProperties %d", path, n, *s.MaxProperties))
	}
	if s.MinProperties != nil && n < *s.MinProperties {
		errs = append(errs, fmt.Sprintf("%s: %d properties are below minProperties %d", path, n, *s.MinProperties))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		child := path + "." + k
		if p, ok := s.Properties[k]; ok {
			errs = append(errs, validate(p, child, m[k])...)
			continue
		}
		if s.EmbeddedResource && (k == "apiVersion" || k == "kind" || k == "metadata") {
			continue
		}
		switch {
		case s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
			errs = append(errs, validate(s.AdditionalProperties.Schema, child, m[k])...)
		case s.AdditionalProperties != nil && s.AdditionalProperties.Allows, s.PreserveUnknown:
		default:
			errs = append(errs, child+": unknown field")
		}
	}
	for _, r := range s.Required {
		if _, ok := m[r]; !ok {
			errs = append(errs, path+"."+r+": required field missing")
		}
	}
	return errs
}

// checkListType enforces the uniqueness that x-kubernetes-list-type map and
// set promise (the API server rejects duplicates).
func checkListType(s *schema, path string, items []any) []string {
	var errs []string
	seen := map[string]int{}
	switch s.ListType {
	case "set":
		for i, it := range items {
			k := canonical(it)
			if j, dup := seen[k]; dup {
				errs = append(errs, fmt.Sprintf("%s[%d]: duplicate of [%d] in a list of type set", path, i, j))
			}
			seen[k] = i
		}
	case "map":
		for i, it := range items {
			obj, ok := it.(map[string]any)
			if !ok {
				continue // the items schema reports the type
			}
			var parts []string
			for _, key := range s.ListMapKeys {
				parts = append(parts, key+"="+canonical(obj[key]))
			}
			k := strings.Join(parts, ",")
			if j, dup := seen[k]; dup {
				errs = append(errs, fmt.Sprintf("%s[%d]: duplicate key (%s) of [%d] in a list of type map", path, i, k, j))
			}
			seen[k] = i
		}
	}
	return errs
}

func (s *schema) pattern() (*regexp.Regexp, error) {
	s.patternOnce.Do(func() { s.patternRE, s.patternErr = regexp.Compile(s.Pattern) })
	return s.patternRE, s.patternErr
}

func typeMatches(t string, v any) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := strconv.ParseInt(n.String(), 10, 64)
		return err == nil
	}
	return false
}

func enumContains(enum []json.RawMessage, v any) bool {
	got := canonical(v)
	for _, e := range enum {
		ev, err := decodeJSON(e)
		if err != nil {
			continue
		}
		if canonical(ev) == got {
			return true
		}
	}
	return false
}

// canonical is a stable text form of a decoded JSON value (maps sorted by
// encoding/json), for equality.
func canonical(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("string %q", x)
	case json.Number:
		return "number " + x.String()
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case []any:
		return fmt.Sprintf("array of %d", len(x))
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

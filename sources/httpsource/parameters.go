package httpsource

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/toolwire/toolwire/internal/configfile"
)

// keywords are JSON Schema 2020-12's keywords (with draft 7's definitions
// and dependencies, which validators still read).
var keywords = []string{
	"$schema", "$id", "$ref", "$defs", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary", "$comment", "definitions",
	"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
	"maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains", "minContains",
	"maxProperties", "minProperties", "required", "dependentRequired", "dependencies",
	"properties", "patternProperties", "additionalProperties", "propertyNames", "items", "prefixItems", "contains",
	"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties",
	"title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples", "format",
	"contentEncoding", "contentMediaType", "contentSchema",
}

// Where keywords hold schemas: one, a list of them, or a mapping of names
// to them.
var (
	schemaKeywords    = []string{"additionalProperties", "propertyNames", "items", "contains", "not", "if", "then", "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema"}
	schemaListKeyword = []string{"allOf", "anyOf", "oneOf", "prefixItems"}
	schemaMapKeywords = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)

// checkParameters reports what in a tool's parameters, a schema written
// in the config file, is surely a mistake that JSON Schema would let
// pass: a keyword that is none ("requierd", "minimun"), which a validator
// ignores, so the tool took any arguments; and a required argument the
// root does not declare as a property, which the model then had to send
// and which is never sent (see Spec.Parameters).
func checkParameters(params json.RawMessage) error {
	var root any
	if err := json.Unmarshal(params, &root); err != nil {
		return err
	}
	if err := checkKeywords("parameters", root); err != nil {
		return err
	}
	obj, _ := root.(map[string]any)
	props, _ := obj["properties"].(map[string]any)
	req, _ := obj["required"].([]any)
	for _, r := range req {
		if name, ok := r.(string); ok && props[name] == nil {
			return fmt.Errorf("parameters.required: %q is not declared in parameters.properties%s: an argument not declared is never sent", name, configfile.Suggest(name, slices.Collect(maps.Keys(props))))
		}
	}
	return nil
}

// checkKeywords checks that every key of the schema s, at path, and of
// the schemas inside it, is a JSON Schema keyword (or an "x-" extension).
func checkKeywords(path string, s any) error {
	obj, ok := s.(map[string]any)
	if !ok {
		return nil // true, false, or what the metaschema refuses
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v := obj[k]
		switch {
		case strings.HasPrefix(k, "x-"):
		case slices.Contains(schemaKeywords, k):
			if err := checkKeywords(path+"."+k, v); err != nil {
				return err
			}
		case slices.Contains(schemaListKeyword, k):
			list, _ := v.([]any)
			for i, e := range list {
				if err := checkKeywords(fmt.Sprintf("%s.%s[%d]", path, k, i), e); err != nil {
					return err
				}
			}
		case slices.Contains(schemaMapKeywords, k):
			m, _ := v.(map[string]any)
			for _, name := range slices.Sorted(maps.Keys(m)) {
				if err := checkKeywords(path+"."+k+"."+name, m[name]); err != nil {
					return err
				}
			}
		case !slices.Contains(keywords, k):
			return fmt.Errorf("%s.%s: not a JSON Schema keyword%s", path, k, configfile.Suggest(k, keywords))
		}
	}
	return nil
}

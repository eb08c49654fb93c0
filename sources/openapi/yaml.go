package openapi

import (
	"github.com/toolwire/toolwire/internal/configfile"
	"go.yaml.in/yaml/v3"
)

// decodeYAML decodes a YAML document into the same tree as decodeJSON, as
// YAML 1.2, which OpenAPI specifies (configfile.Tree): read as YAML 1.1, a
// parameter named y was false and its operation skipped ("a parameter
// has no name"), an enum: [on, off] was true and false, and an unquoted
// swagger: 2.0 was refused.
func decodeYAML(data []byte, v *any) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	tree, err := configfile.Tree(&doc)
	*v = tree
	return err
}

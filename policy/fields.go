package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
)

// fields are the fields of caller, tool and tool.annotations (activation
// builds them), by the path of the map that holds them. CEL declares
// caller and tool as maps of string to dyn, so its checker takes any field
// of them: without this table, `tool.nme == "echo"` compiled, and every
// call then failed to evaluate it (no such key), which a deny rule reads as
// holding, so it refused every call of every tool; and `when: tool.name`
// compiled too, then refused every call as not a bool.
var fields = map[string]map[string]*types.Type{
	"caller":           {"id": cel.StringType, "groups": cel.ListType(cel.StringType), "claims": cel.MapType(cel.StringType, cel.DynType), "method": cel.StringType},
	"tool":             {"name": cel.StringType, "source": cel.StringType, "annotations": cel.MapType(cel.StringType, cel.BoolType)},
	"tool.annotations": {"read_only": cel.BoolType, "destructive": cel.BoolType, "idempotent": cel.BoolType, "open_world": cel.BoolType},
}

// checkFields reports the first field of caller, tool or tool.annotations
// that a's expression selects and that does not exist, at its position in
// the expression as CEL reports its own errors, and the type of a
// condition that is one of those fields, which must be a bool.
func checkFields(a *cel.Ast) (*types.Type, error) {
	native := a.NativeRep()
	var err error
	celast.PreOrderVisit(native.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if err != nil {
			return
		}
		var operand celast.Expr
		var field string
		switch e.Kind() {
		case celast.SelectKind:
			operand, field = e.AsSelect().Operand(), e.AsSelect().FieldName()
		case celast.CallKind: // tool["nme"]
			c := e.AsCall()
			if c.FunctionName() != "_[_]" || len(c.Args()) != 2 || c.Args()[1].Kind() != celast.LiteralKind {
				return
			}
			s, ok := c.Args()[1].AsLiteral().Value().(string)
			if !ok {
				return
			}
			operand, field = c.Args()[0], s
		default:
			return
		}
		path := fieldPath(native, operand)
		known, ok := fields[path]
		if !ok || known[field] != nil {
			return
		}
		loc := native.SourceInfo().GetStartLocation(e.ID())
		err = fmt.Errorf("ERROR: <input>:%d:%d: %s has no field '%s' (its fields: %s)",
			loc.Line(), loc.Column()+1, path, field, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
	}))
	if err != nil {
		return nil, err
	}
	root := native.Expr()
	if root.Kind() == celast.SelectKind {
		if t := fields[fieldPath(native, root.AsSelect().Operand())][root.AsSelect().FieldName()]; t != nil {
			return t, nil
		}
	}
	return a.OutputType(), nil
}

// fieldPath is "caller", "tool" or "tool.annotations" when e is that
// variable or field, and "" otherwise (a comprehension's variable of the
// same name, which is not a map of string to dyn, included).
func fieldPath(a *celast.AST, e celast.Expr) string {
	isVar := func(e celast.Expr, names ...string) bool {
		return e.Kind() == celast.IdentKind && slices.Contains(names, e.AsIdent()) &&
			a.GetType(e.ID()).IsExactType(cel.MapType(cel.StringType, cel.DynType))
	}
	switch {
	case isVar(e, "caller", "tool"):
		return e.AsIdent()
	case e.Kind() == celast.SelectKind && e.AsSelect().FieldName() == "annotations" && isVar(e.AsSelect().Operand(), "tool"):
		return "tool.annotations"
	}
	return ""
}

// Forms generated from a tool's input schema (JSON Schema 2020-12, the
// parts tools use: object, string, number, integer, boolean, array, enum,
// nested objects), and a validator for the same subset, so a form says
// what is wrong as the user types. What the form does not model is edited
// in the raw JSON beside it; the server validates everything again.
import { el, uid } from "./dom.js";

/** typeOf is the schema's type, the first non-null one of a list. */
function typeOf(s) {
  if (!s) return undefined;
  if (Array.isArray(s.type)) return s.type.find((t) => t !== "null");
  if (s.type) return s.type;
  if (s.properties) return "object";
  if (s.enum) return typeof s.enum[0];
  return undefined;
}

function jsonType(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (Number.isInteger(v)) return "integer";
  return typeof v;
}

function typeMatches(want, v) {
  const got = jsonType(v);
  const wants = Array.isArray(want) ? want : [want];
  return wants.some((w) => w === got || (w === "number" && got === "integer"));
}

/** validate returns the problems of value against schema: [{path, message}]. */
export function validate(schema, value, path = "", out = []) {
  if (!schema || typeof schema !== "object") return out;
  const at = path || "(the arguments)";
  if (schema.type && !typeMatches(schema.type, value)) {
    out.push({ path: at, message: `must be ${[].concat(schema.type).join(" or ")}, not ${jsonType(value)}` });
    return out;
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    out.push({ path: at, message: `must be one of ${schema.enum.map((e) => JSON.stringify(e)).join(", ")}` });
  }
  if ("const" in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    out.push({ path: at, message: `must be ${JSON.stringify(schema.const)}` });
  }
  if (typeof value === "string") {
    if (schema.minLength !== undefined && value.length < schema.minLength) out.push({ path: at, message: `must be at least ${schema.minLength} characters` });
    if (schema.maxLength !== undefined && value.length > schema.maxLength) out.push({ path: at, message: `must be at most ${schema.maxLength} characters` });
    if (schema.pattern) {
      try {
        if (!new RegExp(schema.pattern, "u").test(value)) out.push({ path: at, message: `must match ${schema.pattern}` });
      } catch {
        // a pattern JavaScript cannot read: the server checks it
      }
    }
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) out.push({ path: at, message: `must be ≥ ${schema.minimum}` });
    if (schema.maximum !== undefined && value > schema.maximum) out.push({ path: at, message: `must be ≤ ${schema.maximum}` });
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) out.push({ path: at, message: `must be > ${schema.exclusiveMinimum}` });
    if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) out.push({ path: at, message: `must be < ${schema.exclusiveMaximum}` });
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) out.push({ path: at, message: `must have at least ${schema.minItems} items` });
    if (schema.maxItems !== undefined && value.length > schema.maxItems) out.push({ path: at, message: `must have at most ${schema.maxItems} items` });
    if (schema.items && typeof schema.items === "object") value.forEach((v, i) => validate(schema.items, v, `${path}[${i}]`, out));
  }
  if (jsonType(value) === "object") {
    for (const r of schema.required || []) {
      if (!(r in value)) out.push({ path: join(path, r), message: "is required" });
    }
    const props = schema.properties || {};
    for (const [k, v] of Object.entries(value)) {
      if (props[k]) validate(props[k], v, join(path, k), out);
      else if (schema.additionalProperties === false) out.push({ path: join(path, k), message: "is not a property of this tool's arguments" });
      else if (typeof schema.additionalProperties === "object") validate(schema.additionalProperties, v, join(path, k), out);
    }
  }
  return out;
}

function join(path, key) {
  return path ? `${path}.${key}` : key;
}

/**
 * form renders the fields of an object schema into a fieldset bound to
 * value (an object it edits in place); changed() is called after every
 * edit. Nested objects are nested fieldsets; arrays are lists of fields
 * with add and remove buttons.
 */
export function form(schema, value, changed, path = "") {
  const box = el("div", { class: "fields" });
  const props = (schema && schema.properties) || {};
  const required = new Set((schema && schema.required) || []);
  const names = Object.keys(props);
  if (names.length === 0) {
    box.append(el("p", { class: "hint" }, "This tool takes no arguments the form can show; use the JSON editor."));
    return box;
  }
  for (const name of names) {
    box.append(
      field(props[name], name, required.has(name), path ? `${path}.${name}` : name, {
        get: () => value[name],
        set: (v) => {
          if (v === undefined) delete value[name];
          else value[name] = v;
          changed();
        },
      }, changed),
    );
  }
  return box;
}

function label(id, name, s, required) {
  return el("label", { for: id },
    el("span", { class: "name" }, name),
    required ? el("span", { class: "req", title: "required" }, " *") : null,
    s && s.description ? el("span", { class: "desc" }, " — " + s.description) : null);
}

/** field renders one property; slot reads and writes its value. */
function field(s, name, required, path, slot, changed) {
  s = s || {};
  const t = typeOf(s);
  const id = uid("f");
  const cur = slot.get();
  if (s.enum) {
    const sel = el("select", { id, dataset: { path } },
      required ? null : el("option", { value: "" }, "(none)"),
      s.enum.map((v, i) => el("option", { value: String(i), selected: JSON.stringify(v) === JSON.stringify(cur) }, JSON.stringify(v))));
    if (required && cur === undefined && s.enum.length) slot.set(s.enum[0]);
    sel.addEventListener("change", () => slot.set(sel.value === "" ? undefined : s.enum[+sel.value]));
    return el("div", { class: "field" }, label(id, name, s, required), sel);
  }
  switch (t) {
    case "string": {
      const long = (s.maxLength || 0) > 200 || /content|text|body|script|code|query/i.test(name);
      const input = el(long ? "textarea" : "input", { id, rows: long ? 3 : undefined, type: long ? undefined : "text", dataset: { path }, placeholder: s.default !== undefined ? String(s.default) : "" });
      input.value = cur ?? "";
      input.addEventListener("input", () => slot.set(input.value === "" && !required ? undefined : input.value));
      return el("div", { class: "field" }, label(id, name, s, required), input);
    }
    case "number":
    case "integer": {
      const input = el("input", { id, type: "number", step: t === "integer" ? "1" : "any", dataset: { path }, min: s.minimum, max: s.maximum, placeholder: s.default !== undefined ? String(s.default) : "" });
      input.value = cur ?? "";
      input.addEventListener("input", () => {
        if (input.value === "") return slot.set(undefined);
        const n = Number(input.value);
        slot.set(Number.isNaN(n) ? input.value : n);
      });
      return el("div", { class: "field" }, label(id, name, s, required), input);
    }
    case "boolean": {
      const input = el("input", { id, type: "checkbox", dataset: { path }, checked: cur === true });
      if (required && cur === undefined) slot.set(false);
      input.addEventListener("change", () => slot.set(input.checked ? true : required ? false : undefined));
      return el("div", { class: "field check" }, input, label(id, name, s, required));
    }
    case "object": {
      let obj = cur;
      if (obj === undefined || jsonType(obj) !== "object") {
        obj = {};
        if (required) slot.set(obj);
      }
      const inner = form(s, obj, () => {
        if (slot.get() !== obj) slot.set(obj);
        else changed();
      }, path);
      return el("fieldset", { class: "nested", dataset: { path } }, el("legend", {}, name, required ? " *" : "", s.description ? " — " + s.description : ""), inner);
    }
    case "array": {
      let arr = Array.isArray(cur) ? cur : undefined;
      const list = el("ol", { class: "items" });
      const items = s.items || {};
      const render = () => {
        list.replaceChildren();
        (arr || []).forEach((_, i) => {
          const remove = el("button", { type: "button", class: "small", "aria-label": `remove ${name} item ${i + 1}`, onclick: () => {
            arr.splice(i, 1);
            changed();
            render();
          } }, "Remove");
          const itemSlot = { get: () => arr[i], set: (v) => { arr[i] = v; changed(); } };
          list.append(el("li", {}, field(items, `${name}[${i}]`, true, `${path}[${i}]`, itemSlot, changed), remove));
        });
      };
      const add = el("button", { type: "button", class: "small", dataset: { path }, onclick: () => {
        if (!arr) {
          arr = [];
          slot.set(arr);
        }
        arr.push(initial(items));
        changed();
        render();
      } }, `Add ${name} item`);
      render();
      return el("fieldset", { class: "nested" }, el("legend", {}, name, required ? " *" : "", s.description ? " — " + s.description : ""), list, add);
    }
    default: {
      // Anything else (no type, oneOf, …): JSON text for this field alone.
      const input = el("textarea", { id, rows: 2, dataset: { path }, class: "json" });
      input.value = cur === undefined ? "" : JSON.stringify(cur);
      input.addEventListener("input", () => {
        if (input.value.trim() === "") return slot.set(undefined);
        try {
          slot.set(JSON.parse(input.value));
          input.removeAttribute("aria-invalid");
        } catch {
          input.setAttribute("aria-invalid", "true");
        }
      });
      return el("div", { class: "field" }, label(id, name + " (JSON)", s, required), input);
    }
  }
}

/** initial is a new array item's value. */
function initial(s) {
  if (s && s.default !== undefined) return structuredClone(s.default);
  if (s && s.enum) return s.enum[0];
  switch (typeOf(s)) {
    case "string": return "";
    case "number":
    case "integer": return 0;
    case "boolean": return false;
    case "object": return {};
    case "array": return [];
  }
  return null;
}

// A searchable picker of tools: a combobox (an input that searches, over
// a list box of the best matches) in the ARIA pattern, for catalogs of
// thousands of tools. The matching itself is match.js's, through find.
import { el, uid } from "./dom.js";

/** The matches a picker lists at once; a query narrows the rest. */
export const maxShown = 50;

/**
 * picker makes a combobox. find(query) returns the matching tools, best
 * first; describe(tool) returns {summary, source}; onPick(name) is called
 * when one is chosen (a click, or Enter on the highlighted one); known(name)
 * says whether a tool has that name. It
 * returns {box, input, current, close, refresh}: current() is the tool the
 * input names, else the highlighted match, else the best one (or
 * undefined); refresh() draws the matches again (the tools changed).
 */
export function picker({ id, value = "", placeholder = "", label, find, known, describe, onPick }) {
  const listID = uid("picks");
  const input = el("input", {
    id, type: "text", class: "pick", role: "combobox", "aria-autocomplete": "list", "aria-expanded": "false",
    "aria-controls": listID, autocomplete: "off", spellcheck: "false", placeholder, value,
  });
  if (label) input.setAttribute("aria-label", label);
  const list = el("ul", { id: listID, role: "listbox", class: "picker-list", "aria-label": "matching tools" });
  const more = el("p", { class: "picker-more" });
  const pop = el("div", { class: "picker-pop", hidden: true }, list, more);
  const box = el("div", { class: "picker" }, input, pop);
  let matches = [];
  let active = -1;

  const mark = (i) => {
    const items = list.children;
    if (active >= 0 && items[active]) items[active].setAttribute("aria-selected", "false");
    active = i;
    if (active >= 0 && items[active]) {
      items[active].setAttribute("aria-selected", "true");
      input.setAttribute("aria-activedescendant", items[active].id);
      items[active].scrollIntoView({ block: "nearest" });
    } else input.removeAttribute("aria-activedescendant");
  };
  const close = () => {
    pop.hidden = true;
    input.setAttribute("aria-expanded", "false");
    input.removeAttribute("aria-activedescendant");
    active = -1;
  };
  const choose = (name) => {
    input.value = name;
    close();
    onPick(name);
  };
  const draw = () => {
    matches = find(input.value);
    const shown = matches.slice(0, maxShown);
    list.replaceChildren(...shown.map((t, i) => {
      const d = describe(t);
      return el("li", { id: `${listID}-${i}`, role: "option", "aria-selected": "false", dataset: { name: t.name },
        onclick: () => choose(t.name) },
      el("span", { class: "pname" }, t.name),
      d.summary ? el("span", { class: "psum" }, d.summary) : null,
      d.source ? el("span", { class: "psrc" }, d.source) : null);
    }));
    more.textContent = matches.length === 0 ? "No tool matches." : matches.length > shown.length ? `${shown.length} of ${matches.length} matches shown: type more to narrow them.` : `${matches.length} matches.`;
    pop.hidden = false;
    input.setAttribute("aria-expanded", "true");
    mark(shown.length ? 0 : -1);
  };
  // A press anywhere in the list (an option, its scroll bar) keeps the
  // focus in the input, so the list stays open.
  pop.addEventListener("mousedown", (ev) => ev.preventDefault());
  input.addEventListener("input", draw);
  input.addEventListener("blur", close);
  input.addEventListener("keydown", (ev) => {
    const n = list.children.length;
    switch (ev.key) {
      case "ArrowDown":
        ev.preventDefault();
        if (pop.hidden) draw();
        else if (n) mark((active + 1) % n);
        break;
      case "ArrowUp":
        ev.preventDefault();
        if (!pop.hidden && n) mark((active - 1 + n) % n);
        break;
      case "Enter":
        if (!pop.hidden && active >= 0 && matches[active]) {
          ev.preventDefault();
          choose(matches[active].name);
        }
        break;
      case "Escape":
        if (!pop.hidden) {
          ev.preventDefault();
          close();
        }
        break;
    }
  });
  const current = () => {
    const q = input.value.trim();
    if (known(q)) return q;
    if (!pop.hidden && active >= 0 && matches[active]) return matches[active].name;
    const best = q ? find(q)[0] : undefined;
    return best ? best.name : undefined;
  };
  return { box, input, current, close, refresh: () => { if (!pop.hidden) draw(); } };
}

// The recommendation page: builds its form from GET schema, asks POST recommend as any program
// would, and shows the answer. Plain JavaScript, no build step; only this service's JSON API.
"use strict";
(function () {
  var form = null; // the FormSchema of GET schema
  var byName = {}; // field name -> {field, index}

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else if (k === "class") node.className = attrs[k];
      else node.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { if (c) node.appendChild(c); });
    return node;
  }

  function fmtNumber(v) {
    return v.toLocaleString("en-US", { maximumFractionDigits: 6 });
  }

  // "12 months", "1 year", "5,000 DM": a number with its unit (a plural unit loses its s for 1).
  function amount(v, unit) {
    if (!unit) return fmtNumber(v);
    var u = v === 1 && unit.length > 2 && unit.charAt(unit.length - 1) === "s" ? unit.slice(0, -1) : unit;
    return fmtNumber(v) + " " + u;
  }

  // A value as people read it: a level's name, a number with separators and its unit.
  function show(name, v) {
    var f = byName[name] && byName[name].field;
    if (f && f.options) {
      for (var i = 0; i < f.options.length; i++) {
        if (String(f.options[i].value) === String(v)) return f.options[i].label;
      }
    }
    if (f && f.kind === "capability") return v ? "yes" : "no";
    return typeof v === "number" ? amount(v, f && f.unit) : String(v);
  }

  // A feature only time moves (age): its change is a wait, "4 years".
  function timeOf(c) {
    var f = byName[c.feature] && byName[c.feature].field;
    return f && f.time && typeof c.from === "number" && typeof c.to === "number" && c.to > c.from ? f.time : null;
  }

  function waitText(changes) {
    var longest = null;
    changes.forEach(function (c) {
      var t = timeOf(c);
      if (t && (longest === null || c.to - c.from > longest.n)) longest = { n: c.to - c.from, unit: t };
    });
    return longest && amount(longest.n, longest.unit);
  }

  function labelOf(name) { return byName[name] ? byName[name].field.label : name; }

  function levelIndex(f, v) {
    for (var i = 0; i < f.options.length; i++) if (String(f.options[i].value) === String(v)) return i;
    return -1;
  }

  // "Lower the credit amount from 4,500 to 3,200 and raise the duration from 12 to 24".
  function clause(c) {
    var f = byName[c.feature] && byName[c.feature].field;
    var what = "the " + labelOf(c.feature);
    var up = null;
    if (typeof c.from === "number" && typeof c.to === "number" && !(f && f.options)) up = c.to > c.from;
    else if (f && f.options && f.kind !== "categorical") up = levelIndex(f, c.to) > levelIndex(f, c.from);
    var verb = up === null ? "change" : (up ? "raise" : "lower");
    return verb + " " + what + " from " + show(c.feature, c.from) + " to " + show(c.feature, c.to);
  }

  function joinWords(parts) {
    if (parts.length <= 1) return parts.join("");
    return parts.slice(0, -1).join(", ") + " and " + parts[parts.length - 1];
  }

  function capital(s) { return s ? s.charAt(0).toUpperCase() + s.slice(1) : s; }

  function sentence(res) {
    if (res.status === "already_positive") return "The model already accepts this record: nothing needs to change.";
    var refused = res.refused_by && res.refused_by.length;
    if (res.status === "no_recourse") {
      return refused ? "No change that the rules allow gets this record accepted (proved): the rules below rule out the changes that would."
                     : "No change that the rules allow gets this record accepted (proved).";
    }
    if (res.status === "unknown") {
      return refused ? "No answer that keeps the rules was found in time: ask again in a moment."
                     : "The answer was not ready within the time budget: ask again in a moment.";
    }
    if (form.kind === "capability") {
      return "Take " + joinWords(res.actions.map(function (a) { return a.name; })) + ".";
    }
    if (form.kind === "sequential" && res.steps.length) {
      return capital(joinWords(res.steps.map(function (s, i) {
        var did = s.changes.length ? joinWords(s.changes.map(clause)) : s.action;
        return (res.steps.length === 1 ? "" : (i === 0 ? "first " : "then ")) + did;
      }))) + ".";
    }
    return changesSentence(res.changes);
  }

  // "Lower the credit amount from 4,500 DM to 3,200 DM."; with a feature only time moves, "In 4 years, ...".
  function changesSentence(changes) {
    var wait = waitText(changes);
    var acts = changes.filter(function (c) { return !timeOf(c); }).map(clause);
    if (!wait) return capital(joinWords(acts)) + ".";
    if (!acts.length) return "Wait " + wait + ": nothing else needs to change.";
    return "In " + wait + ", " + joinWords(acts) + ".";
  }

  // The rules behind an answer, as sentences (GET schema): those that refused the changes found
  // (refused_by), or those the API says bear on the answer (rules). Each sentence once; a sentence the
  // fields' tags already say (the schema's mutability) is left out of the second list.
  function rulesFor(res) {
    var rules = form.rules || [];
    var seen = {}, out = [];
    function add(name) {
      var r = rules.filter(function (q) { return q.name === name; })[0] || { name: name, text: name };
      if (!seen[r.text]) { seen[r.text] = true; out.push(r); }
    }
    if (res.refused_by && res.refused_by.length) {
      res.refused_by.forEach(add);
      return { refused: true, rules: out };
    }
    rules.forEach(function (r) { if (r.from_schema) seen[r.text] = true; });
    (res.rules || []).forEach(add);
    return { refused: false, rules: out };
  }

  // ------------------------------------------------------------------------------- the form
  function buildForm() {
    var box = $("fields");
    box.textContent = "";
    form.fields.forEach(function (f, i) {
      byName[f.name] = { field: f, index: i };
      var id = "f-" + i;
      var described = "help-" + i + " err-" + i;
      var control;
      if (f.input === "select") {
        control = el("select", { id: id, name: f.name });
        f.options.forEach(function (o) {
          control.appendChild(el("option", { value: JSON.stringify(o.value), text: o.label }));
        });
      } else if (f.input === "checkbox") {
        control = el("input", { id: id, name: f.name, type: "checkbox" });
      } else {
        control = el("input", { id: id, name: f.name, type: "number", inputmode: f.step === 1 ? "numeric" : "decimal",
                                step: f.step === null ? "any" : String(f.step) });
        if (f.minimum !== null) control.setAttribute("min", String(f.minimum));
        if (f.maximum !== null) control.setAttribute("max", String(f.maximum));
      }
      control.setAttribute("aria-describedby", described);
      var label = el("label", { for: id, text: f.label });
      if (f.mutability === "immutable") label.appendChild(el("span", { class: "tag fixed", text: "fixed" }));
      if (f.time) label.appendChild(el("span", { class: "tag", text: "moves with time" }));
      else if (f.mutability === "increase" && f.kind !== "capability") label.appendChild(el("span", { class: "tag", text: "can only increase" }));
      if (f.mutability === "decrease") label.appendChild(el("span", { class: "tag", text: "can only decrease" }));
      var help = f.input === "number" && f.minimum !== null ?
        fmtNumber(f.minimum) + " to " + amount(f.maximum, f.unit) + (f.step === 1 ? ", whole numbers" : "") : "";
      var wrap = el("div", { class: "field" + (f.input === "checkbox" ? " checkbox" : ""), id: "field-" + i,
                             "data-name": f.name }, f.input === "checkbox" ? [control, label] : [label, control]);
      wrap.appendChild(el("small", { id: "help-" + i, text: help, title: f.description }));
      wrap.appendChild(el("p", { id: "err-" + i, class: "field-error" }));
      box.appendChild(wrap);
    });
    var own = {}, listed = (form.rules || []).filter(function (r) {
      if (r.from_schema) { own[r.text] = true; return false; }
      if (own[r.text]) return false;
      own[r.text] = true;
      return true;
    });
    $("all-rules").hidden = !listed.length;
    $("all-rules-list").textContent = "";
    listed.forEach(function (r) { $("all-rules-list").appendChild(el("li", { "data-rule": r.name, text: r.text })); });
    if (form.max_diverse > 0) {
      $("diverse-field").hidden = false;
      $("n_diverse").setAttribute("max", String(form.max_diverse));
      $("n_diverse").value = String(Math.min(2, form.max_diverse));
    }
  }

  function controlOf(i) { return $("f-" + i); }

  function readValue(f, i) {
    var c = controlOf(i);
    if (f.input === "checkbox") return c.checked ? 1 : 0;
    if (f.input === "select") return JSON.parse(c.value);
    if (c.value.trim() === "") return null;
    var n = Number(c.value);
    return isNaN(n) ? c.value : n;
  }

  function body() {
    var out = {};
    if (form.body === "agent") {
      out.x = [];
      form.fields.forEach(function (f, i) {
        if (f.kind === "capability") out.x.push(readValue(f, i));
        else out[f.name] = readValue(f, i);
      });
      return out;
    }
    form.fields.forEach(function (f, i) { out[f.name] = readValue(f, i); });
    if (form.max_diverse > 0) {
      var n = $("n_diverse").value.trim();
      out.n_diverse = n === "" ? 0 : Number(n);
    }
    return out;
  }

  function fill(record) {
    form.fields.forEach(function (f, i) {
      var v = f.kind === "capability" ? record.x[i] : record[f.name];
      if (v === undefined) return;
      var c = controlOf(i);
      if (f.input === "checkbox") c.checked = !!v;
      else if (f.input === "select") c.value = JSON.stringify(v);
      else c.value = String(v);
    });
  }

  // ------------------------------------------------------------------------------- errors
  function clearErrors() {
    $("form-error").textContent = "";
    $("n_diverse-error").textContent = "";
    $("n_diverse").removeAttribute("aria-invalid");
    form.fields.forEach(function (f, i) {
      $("err-" + i).textContent = "";
      controlOf(i).removeAttribute("aria-invalid");
    });
  }

  // The API names the field first ("age: ...", errors[].field "age", "x[3]", "group", "n_diverse").
  function showError(field, message) {
    var target = null, control = null;
    var m = /^x\[(\d+)\]$/.exec(field);
    if (field === "n_diverse") { target = $("n_diverse-error"); control = $("n_diverse"); }
    else if (m && form.body === "agent") { target = $("err-" + m[1]); control = controlOf(Number(m[1])); }
    else if (byName[field]) { target = $("err-" + byName[field].index); control = controlOf(byName[field].index); }
    if (!target) {
      $("form-error").textContent = (field ? field + ": " : "") + message;
      return $("form-error");
    }
    target.textContent = message;
    control.setAttribute("aria-invalid", "true");
    return control;
  }

  function showApiError(status, data) {
    var first = null;
    if (data && Array.isArray(data.errors) && data.errors.length) {
      data.errors.forEach(function (e) { var c = showError(e.field, e.message); first = first || c; });
    } else {
      var detail = data && typeof data.detail === "string" ? data.detail : "the service answered " + status;
      var cut = detail.indexOf(": ");
      first = cut > 0 ? showError(detail.slice(0, cut), detail.slice(cut + 2)) : showError("", detail);
    }
    if (first && first.focus) first.focus();
  }

  // ------------------------------------------------------------------------------- the answer
  function changesTable(changes, cls) {
    var rows = changes.map(function (c) {
      var t = timeOf(c);
      return el("tr", { "data-feature": c.feature, "data-from": JSON.stringify(c.from), "data-to": JSON.stringify(c.to),
                        class: t ? "time" : "" }, [
        el("th", { scope: "row", text: labelOf(c.feature) }),
        el("td", { class: "num", text: show(c.feature, c.from) }),
        el("td", { class: "num", text: t ? "in " + amount(c.to - c.from, t) + " (" + show(c.feature, c.to) + ")"
                                         : show(c.feature, c.to) })]);
    });
    var head = el("thead", {}, [el("tr", {}, [el("th", { scope: "col", text: "Feature" }),
      el("th", { scope: "col", text: "Now" }), el("th", { scope: "col", text: "Recommended" })])]);
    return el("div", { class: "table-wrap" }, [el("table", { class: cls }, [head, el("tbody", {}, rows)])]);
  }

  function badge(text, yes, cls) { return el("span", { class: "badge " + (yes ? "yes" : "no") + (cls ? " " + cls : ""), text: text }); }

  function costText(res) {
    if (form.kind === "tabular") return res.distance === null ? null : "cost (normalized distance) " + res.distance.toPrecision(3);
    if (form.kind === "sequential") return res.total_cost === null ? null : "total cost " + res.total_cost.toPrecision(4);
    return res.cost === null ? null : "cost " + fmtNumber(res.cost);
  }

  function optimalText(res) {
    if (res.optimal !== true) return null;
    var cert = form.certificate;
    if (!cert || (cert.rel_tol === 0 && cert.epsilon === 0)) return "optimal (exact)";
    var d = form.kind === "tabular" ? res.distance : null;
    if (d === null) return "optimal (certified)";
    var gap = Math.max(cert.rel_tol * d, cert.epsilon);
    return "optimal (certified within " + gap.toPrecision(2) + ")";
  }

  function badges(res) {
    var box = $("badges");
    box.textContent = "";
    box.appendChild(badge(res.verified ? "verified" : "not verified", res.verified, "verified"));
    var opt = optimalText(res);
    box.appendChild(opt ? badge(opt, true, "optimal") : el("span", { class: "badge optimal", text: "optimality not certified" }));
    if (res.budget_exceeded) box.appendChild(badge("time budget exceeded", false));
  }

  // Who answered and the cost behind it: for the curious, folded away.
  function details(res) {
    var cost = costText(res);
    return el("details", { class: "details" }, [el("summary", { text: "Details" }),
      el("p", { class: "method", text: "Answered by " + res.method + "." }),
      cost ? el("p", { class: "cost", text: capital(cost) + "." }) : null]);
  }

  function rulesBox(res) {
    var found = rulesFor(res);
    if (!found.rules.length) return null;
    var title = found.refused ? "The rules that ruled out the changes found" : "Rules this answer keeps";
    return el("div", { id: "rules", class: "rules" }, [el("h3", { text: title }),
      el("ul", {}, found.rules.map(function (r) { return el("li", { "data-rule": r.name, text: r.text }); }))]);
  }

  function stepsList(steps) {
    return el("ol", { class: "steps" }, steps.map(function (s) {
      var stateRows = Object.keys(s.state).map(function (k) {
        return el("tr", {}, [el("th", { scope: "row", text: labelOf(k) }), el("td", { class: "num", text: show(k, s.state[k]) })]);
      });
      return el("li", { class: "step", "data-action": s.action }, [
        el("p", {}, [el("strong", { text: s.action }),
          document.createTextNode((s.value === null ? "" : " to " + fmtNumber(s.value)) + " · cost " + s.cost.toPrecision(4))]),
        s.changes.length ? changesTable(s.changes, "step-changes") : null,
        el("details", {}, [el("summary", { text: "The record after this step" }),
          el("div", { class: "table-wrap" }, [el("table", {}, [el("tbody", {}, stateRows)])])])]);
    }));
  }

  function render(res, focus) {
    $("sentence").textContent = sentence(res);
    badges(res);
    var box = $("result");
    box.textContent = "";
    var info = $("answer-details");
    info.textContent = "";
    info.appendChild(details(res));
    if (form.kind === "capability") {
      if (res.actions.length) {
        box.appendChild(el("ol", { class: "actions" }, res.actions.map(function (a) {
          return el("li", { "data-action": a.name, text: a.name + (a.effects.length ? " (adds " + a.effects.join(", ") + ")" : "") });
        })));
      }
    } else {
      if (form.kind === "sequential" && res.steps.length) {
        box.appendChild(el("h3", { text: "Steps, in order" }));
        box.appendChild(stepsList(res.steps));
        box.appendChild(el("h3", { text: "All changes together" }));
      }
      if (res.changes.length) box.appendChild(changesTable(res.changes, "changes"));
      var rb = rulesBox(res);
      if (rb) box.appendChild(rb);
    }
    var alts = res.alternatives || [];
    $("alternatives-wrap").hidden = !alts.length;
    $("alternatives").textContent = "";
    alts.forEach(function (a, k) {
      $("alternatives").appendChild(el("article", { class: "card alternative" }, [
        el("h4", { text: "Alternative " + (k + 1) }),
        el("p", { text: changesSentence(a.changes) }),
        changesTable(a.changes, "changes"),
        el("p", { class: "badges" }, [badge(a.verified ? "verified" : "not verified", a.verified)]),
        details(a)]));
    });
    var section = $("answer");
    section.hidden = false;
    section.setAttribute("data-status", res.status);
    if (focus) section.focus();
  }

  // ------------------------------------------------------------------------------- wiring
  // A server with API keys answers 401: ask for the key once, keep it for this tab, send it as a bearer token.
  function call(method, path, payload, asked) {
    var opts = { method: method, headers: { Accept: "application/json" } };
    var key = window.sessionStorage.getItem("recourse-api-key");
    if (key) opts.headers.Authorization = "Bearer " + key;
    if (payload !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(payload);
    }
    return fetch(path, opts).then(function (r) {
      if (r.status === 401 && !asked) {
        var given = window.prompt("This server needs an API key:");
        if (given) {
          window.sessionStorage.setItem("recourse-api-key", given.trim());
          return call(method, path, payload, true);
        }
      }
      return r.text().then(function (t) {
        var data = null;
        try { data = t ? JSON.parse(t) : null; } catch (e) { data = { detail: t.slice(0, 200) }; }
        return { status: r.status, data: data };
      });
    });
  }

  function busy(on) {
    $("submit").disabled = on;
    $("example").disabled = on;
    document.body.setAttribute("aria-busy", on ? "true" : "false");
  }

  // The answer first (no alternatives: it never waits for a search), then the same request with
  // the alternatives asked for, which may take up to the service's fallback budget.
  function submit(ev) {
    ev.preventDefault();
    clearErrors();
    busy(true);
    var req = body();
    var wanted = req.n_diverse || 0;
    var section = $("answer");
    section.setAttribute("data-alternatives", "none");
    if (wanted > 0) req.n_diverse = 0;
    call("POST", "recommend", req).then(function (r) {
      if (r.status !== 200) { section.hidden = true; showApiError(r.status, r.data); return; }
      render(r.data, true);
      if (wanted > 0 && r.data.status === "ok") {
        section.setAttribute("data-alternatives", "pending");
        req.n_diverse = wanted;
        return call("POST", "recommend", req).then(function (r2) {
          if (r2.status === 200 && r2.data.status === "ok") render(r2.data, false);
          section.setAttribute("data-alternatives", "done");
        });
      }
    }).catch(function (e) {
      showError("", "The service cannot be reached (" + e.message + ").");
    }).then(function () { busy(false); });
  }

  function example() {
    clearErrors();
    busy(true);
    call("GET", "example").then(function (r) {
      if (r.status === 200) { fill(r.data.record); $("answer").hidden = true; controlOf(0).focus(); }
      else showApiError(r.status, r.data);
    }).catch(function (e) {
      showError("", "The service cannot be reached (" + e.message + ").");
    }).then(function () { busy(false); });
  }

  function start() {
    call("GET", "schema").then(function (r) {
      if (r.status !== 200) throw new Error((r.data && r.data.detail) || "status " + r.status);
      form = r.data;
      var ruled = (form.rules || []).some(function (r) { return !r.from_schema; });
      $("subtitle").textContent = form.title + " · every answer is checked against the model" +
        (ruled ? " and the rules below." : ".");
      buildForm();
      $("record-form").addEventListener("submit", submit);
      $("example").addEventListener("click", example);
      document.body.setAttribute("data-ready", "true");
    }).catch(function (e) {
      $("subtitle").textContent = "";
      $("form-error").textContent = "The form cannot be loaded: " + e.message;
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

// The history page: show the precomputed diff of the two picked results sets (ecp interop site).
(function () {
  var data = document.getElementById("diffs");
  if (!data) return;
  var diffs = JSON.parse(data.textContent);
  var a = document.getElementById("diff-a"), b = document.getElementById("diff-b");
  var body = document.querySelector("#diff-table tbody"), summary = document.getElementById("diff-summary");
  function cell(side) {
    var td = document.createElement("td");
    if (side) { td.className = "cell " + side.status; td.textContent = side.text; }
    else td.textContent = "-";
    return td;
  }
  function show() {
    body.textContent = "";
    if (a.value === b.value) { summary.textContent = "Pick two different sets."; return; }
    var rows = diffs[a.value + "|" + b.value] || [];
    summary.textContent = rows.length + " cell(s) changed from " + a.value + " to " + b.value + ".";
    rows.forEach(function (r) {
      var tr = document.createElement("tr");
      tr.className = "diff-row " + r.change;
      [r.role, r.implementation, r.release, r.change].forEach(function (t) {
        var td = document.createElement("td"); td.textContent = t; tr.appendChild(td);
      });
      tr.appendChild(cell(r.before)); tr.appendChild(cell(r.after));
      body.appendChild(tr);
    });
  }
  a.addEventListener("change", show); b.addEventListener("change", show);
  show();
})();

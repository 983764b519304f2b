// Sorts table.sortable by the clicked column (numbers numerically, rows without a value last).
document.querySelectorAll("table.sortable th").forEach(function (th, column) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0];
    var descending = !th.classList.contains("sorted-desc");
    table.querySelectorAll("th").forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
    th.classList.add(descending ? "sorted-desc" : "sorted-asc");
    var rows = Array.from(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[column].dataset.value || "", y = b.cells[column].dataset.value || "";
      if (x === "" || y === "") { return (x === "") - (y === ""); }
      var nx = Number(x), ny = Number(y);
      var order = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});

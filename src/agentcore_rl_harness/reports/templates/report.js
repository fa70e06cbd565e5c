(function(){
  function key(row, col){
    var cell = row.children[col];
    var v = cell.getAttribute('data-v');
    if (v === null) { v = cell.textContent; }
    var n = parseFloat(v);
    return isNaN(n) || String(n) !== v.trim() ? v : n;
  }
  var tables = document.querySelectorAll('table.sortable');
  for (var t = 0; t < tables.length; t++) {
    (function(table){
      var heads = table.querySelectorAll('th');
      for (var i = 0; i < heads.length; i++) {
        (function(col, head){
          head.classList.add('sortable');
          head.addEventListener('click', function(){
            var body = table.tBodies[0];
            var rows = Array.prototype.slice.call(body.rows);
            var dir = head.getAttribute('data-dir') === 'asc' ? -1 : 1;
            head.setAttribute('data-dir', dir === 1 ? 'asc' : 'desc');
            rows.sort(function(a, b){
              var x = key(a, col), y = key(b, col);
              if (typeof x !== typeof y) { x = String(x); y = String(y); }
              return x < y ? -dir : x > y ? dir : 0;
            });
            for (var r = 0; r < rows.length; r++) { body.appendChild(rows[r]); }
          });
        })(i, heads[i]);
      }
    })(tables[t]);
  }
  document.body.setAttribute('data-ok', String(document.querySelectorAll('tr.rollout').length));
})();

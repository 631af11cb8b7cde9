#pragma clang diagnostic ignored "-Wmissing-prototypes"

#include <metal_stdlib>
#include <simd/simd.h>

using namespace metal;

struct _5
{
    uint _m0;
    uint _m1;
    uint _m2;
    uint _m3;
    uint _m4;
    uint _m5;
    uint _m6;
    uint _m7;
    float _m8;
    float _m9;
    float _m10;
    float _m11;
    float _m12;
    float _m13;
    float _m14;
    float _m15;
};

struct _9
{
    float _m0[1];
};

struct _12
{
    float _m0[1];
};

struct _15
{
    _5 _m0;
};

static inline __attribute__((always_inline))
uint _91(uint _93, uint _94)
{
    return _93 % ((_94 == 0u) ? 1u : _94);
}

static inline __attribute__((always_inline))
uint _99(uint _100, uint _101)
{
    return _100 / ((_101 == 0u) ? 1u : _101);
}

static inline __attribute__((always_inline))
float _23(uint _18, float _19, float _20, float _21, float _22)
{
    return (((float(_18) + _19) * _20) / _21) - _22;
}

static inline __attribute__((always_inline))
uint _34(float _32, uint _33, const device _15& v_14)
{
    float _46 = 0.0;
    float _50 = floor(_32);
    bool _55 = abs((_32 - _50) - 0.5) <= 9.9999999747524270787835121154785e-07;
    _46 = floor(_32 + 0.5);
    if ((v_14._m0._m7 == 0u) && _55)
    {
        _46 = _50;
    }
    if ((v_14._m0._m7 == 1u) && _55)
    {
        _46 = _50 + 1.0;
    }
    if (v_14._m0._m7 == 2u)
    {
        _46 = _50;
    }
    if (v_14._m0._m7 == 3u)
    {
        _46 = ceil(_32);
    }
    return uint(fast::clamp(fast::clamp(_46, 0.0, float(_33 - 1u)), 0.0, 4294967040.0));
}

kernel void main0(const device _9& _8 [[buffer(0)]], device _12& _11 [[buffer(1)]], const device _15& v_14 [[buffer(2)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    uint _129 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_129 >= v_14._m0._m0)
    {
        return;
    }
    uint _137 = _91(_129, v_14._m0._m3);
    uint _165 = v_14._m0._m1;
    uint _166 = _99(_129, (v_14._m0._m3 * v_14._m0._m5) * v_14._m0._m4) * _165;
    float _180 = _23(_91(_99(_129, v_14._m0._m3 * v_14._m0._m5), v_14._m0._m4), v_14._m0._m8, v_14._m0._m9, v_14._m0._m10, v_14._m0._m11);
    float _193 = _23(_91(_99(_129, v_14._m0._m3), v_14._m0._m5), v_14._m0._m12, v_14._m0._m13, v_14._m0._m14, v_14._m0._m15);
    if (v_14._m0._m6 == 0u)
    {
        _11._m0[_129] = _8._m0[((((_166 + _34(_180, v_14._m0._m1, v_14)) * v_14._m0._m2) + _34(_193, v_14._m0._m2, v_14)) * v_14._m0._m3) + _137];
        return;
    }
    float _222 = fast::clamp(_180, 0.0, float(v_14._m0._m1 - 1u));
    float _227 = fast::clamp(_193, 0.0, float(v_14._m0._m2 - 1u));
    uint _230 = uint(fast::clamp(floor(_222), 0.0, 4294967040.0));
    uint _233 = uint(fast::clamp(floor(_227), 0.0, 4294967040.0));
    uint _238 = min((_230 + 1u), (v_14._m0._m1 - 1u));
    uint _243 = min((_233 + 1u), (v_14._m0._m2 - 1u));
    float _247 = _227 - float(_233);
    uint _256 = ((((_166 + _230) * v_14._m0._m2) + _233) * v_14._m0._m3) + _137;
    uint _278 = ((((_166 + _238) * v_14._m0._m2) + _233) * v_14._m0._m3) + _137;
    float _294 = _8._m0[_256] + ((_8._m0[((((_166 + _230) * v_14._m0._m2) + _243) * v_14._m0._m3) + _137] - _8._m0[_256]) * _247);
    _11._m0[_129] = _294 + (((_8._m0[_278] + ((_8._m0[((((_166 + _238) * v_14._m0._m2) + _243) * v_14._m0._m3) + _137] - _8._m0[_278]) * _247)) - _294) * (_222 - float(_230)));
}

